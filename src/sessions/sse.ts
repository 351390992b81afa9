import type { StoredEvent } from '../session-record/event-log'
import type { EventSink, FollowSession } from './stream'

/**
 * Server-sent events framing (spec 6.1) of a session's event stream: `id:` is the event's seq,
 * status events are named `status`, harness events go out unnamed (EventSource's `message`, so
 * their own `error` type cannot be taken for the stream's `error` event); `done` and `error` end
 * the stream; a comment keeps an idle connection open.
 */

const encoder = new TextEncoder()
const KEEPALIVE = encoder.encode(': keepalive\n\n')

function frame(event: string | null, data: unknown, id?: number, json = JSON.stringify(data)): Uint8Array {
  const lines = [id === undefined ? null : `id: ${id}`, event ? `event: ${event}` : null, `data: ${json}`]
  return encoder.encode(`${lines.filter(Boolean).join('\n')}\n\n`)
}

// Every subscriber of a session gets the same bytes for an event: encode each event once.
const encoded = new WeakMap<StoredEvent, Uint8Array>()

function eventFrame(event: StoredEvent): Uint8Array {
  let bytes = encoded.get(event)
  if (!bytes) {
    bytes = frame(event.kind === 'status' ? 'status' : null, event.data, event.seq, event.json)
    encoded.set(event, bytes)
  }
  return bytes
}

// And the same chunk for a whole live batch.
const batches = new WeakMap<StoredEvent[], Uint8Array>()

function batchFrame(events: StoredEvent[]): Uint8Array {
  let bytes = batches.get(events)
  if (!bytes) {
    const frames = events.map(eventFrame)
    bytes = new Uint8Array(frames.reduce((n, f) => n + f.length, 0))
    let at = 0
    for (const f of frames) {
      bytes.set(f, at)
      at += f.length
    }
    batches.set(events, bytes)
  }
  return bytes
}

/** The bytes of a followed session, for a `text/event-stream` response. */
export function sseStream(follow: FollowSession): ReadableStream<Uint8Array> {
  let stop = () => {}
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        const sink: EventSink = {
          event: (event) => controller.enqueue(eventFrame(event)),
          batch: (events) => controller.enqueue(batchFrame(events)),
          done: (body) => controller.enqueue(frame('done', body)),
          error: (message) => controller.enqueue(frame('error', { message })),
          keepalive: () => controller.enqueue(KEEPALIVE),
          behind: () => -(controller.desiredSize ?? 0),
          close: () => controller.close(),
        }
        stop = follow(sink)
      },
      cancel() {
        stop()
      },
    },
    { highWaterMark: 1 },
  )
}
