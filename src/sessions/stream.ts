import { statusIn } from '../domain/status'
import type { StoredEvent } from './event-log'
import type { SessionRow, SessionStore } from './store'
import { outputLine, answerOf } from './view'

export interface StreamOptions {
  /** Resume after this event id (Last-Event-ID or ?cursor). */
  afterSeq: number
  keepaliveMs: number
  /** Events a reader may fall behind by before it is dropped (it reconnects with its cursor). */
  maxBuffered?: number
  /** Asked periodically whether the reader may still follow; the stream ends when it may not. */
  recheck?: StreamRecheck
}

export interface StreamRecheck {
  everyMs: number
  /** False (or a throw) once the credential the stream was opened with no longer grants it. */
  allowed(): boolean | Promise<boolean>
}

const REVOKED = 'The credential this stream was opened with was revoked, rotated or has expired; reconnect with a valid one'

const encoder = new TextEncoder()

function frame(event: string | null, data: unknown, id?: number, json = JSON.stringify(data)): Uint8Array {
  const lines = [id === undefined ? null : `id: ${id}`, event ? `event: ${event}` : null, `data: ${json}`]
  return encoder.encode(`${lines.filter(Boolean).join('\n')}\n\n`)
}

// Every subscriber of a session gets the same bytes for an event: encode each event once.
const encoded = new WeakMap<StoredEvent, Uint8Array>()

function toFrame(event: StoredEvent): Uint8Array {
  let bytes = encoded.get(event)
  if (!bytes) {
    // Harness events go out unnamed (EventSource's `message`), so their own `error` type cannot
    // be taken for the stream's `error` event.
    bytes = frame(event.kind === 'status' ? 'status' : null, event.data, event.seq, event.json)
    encoded.set(event, bytes)
  }
  return bytes
}

const batches = new WeakMap<StoredEvent[], Uint8Array>()

function batchFrame(events: StoredEvent[]): Uint8Array {
  let bytes = batches.get(events)
  if (!bytes) {
    const frames = events.map(toFrame)
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

const endsTurnish = (event: StoredEvent) => event.kind === 'status' && statusIn('resting', String(event.data.status))

/**
 * A session's event stream (spec 6.1): durable events after the cursor, then live ones as their
 * batches commit, without gap or duplicate; `done` once the session rests; keepalive comments
 * while idle. Subscribing before replaying closes the gap between the two.
 */
export function sessionEventStream(store: SessionStore, sessionId: string, options: StreamOptions): ReadableStream<Uint8Array> {
  const maxBuffered = options.maxBuffered ?? 10_000
  let unsubscribe = () => {}
  let keepalive: ReturnType<typeof setInterval> | undefined
  let recheck: ReturnType<typeof setInterval> | undefined
  // Also set when the reader cancels, so that a recheck answering afterwards enqueues nothing.
  let closed = false
  const stop = () => {
    unsubscribe()
    if (keepalive) clearInterval(keepalive)
    if (recheck) clearInterval(recheck)
  }
  return new ReadableStream<Uint8Array>({
    start(controller) {
      let last = options.afterSeq
      let replaying = true
      const early: StoredEvent[] = []
      const close = () => {
        if (closed) return
        closed = true
        stop()
        controller.close()
      }
      const finishIfResting = (row: SessionRow | null) => {
        if (!row || !statusIn('resting', row.status)) return false
        controller.enqueue(frame('done', { status: row.status, output: outputLine(row), result: answerOf(row) }))
        close()
        return true
      }
      const send = (events: StoredEvent[]) => {
        // The common case, a live batch all new to this reader with no rest in it, goes out as one
        // chunk that every reader shares.
        if (events.length > 1 && events[0]!.seq > last && !events.some(endsTurnish)) {
          controller.enqueue(batchFrame(events))
          last = events.at(-1)!.seq
          return
        }
        for (const event of events) {
          if (closed) return
          if (event.seq <= last) continue
          last = event.seq
          controller.enqueue(toFrame(event))
          if (event.kind === 'status' && statusIn('resting', String(event.data.status))) {
            // Only the session's current rest ends the stream, not an earlier turn's.
            const row = store.get(sessionId)
            if (row && row.status === event.data.status && finishIfResting(row)) return
          }
        }
      }
      unsubscribe = store.events.subscribe(sessionId, (events) => {
        if (closed) return false
        if (replaying) {
          early.push(...events)
          return true
        }
        // A reader that does not read is dropped rather than allowed to hold memory or the run.
        if ((controller.desiredSize ?? 0) < -maxBuffered) {
          controller.enqueue(frame('error', { message: 'This reader fell behind; reconnect with Last-Event-ID to resume' }))
          close()
          return false
        }
        send(events)
        return !closed
      })
      send(store.events.replay(sessionId, options.afterSeq))
      replaying = false
      if (!closed) send(early)
      if (!closed) finishIfResting(store.get(sessionId))
      if (!closed) keepalive = setInterval(() => controller.enqueue(encoder.encode(': keepalive\n\n')), options.keepaliveMs)
      // Authentication ran once, when the stream opened; a stream may stay open for hours, so a
      // revoked or rotated key (or a removed member) must not keep reading the session's events.
      const check = options.recheck
      if (!closed && check) {
        let asking = false
        recheck = setInterval(async () => {
          if (asking || closed) return
          asking = true
          let allowed = false
          try {
            allowed = await check.allowed()
          } catch {
            allowed = false
          }
          asking = false
          if (allowed || closed) return
          controller.enqueue(frame('error', { message: REVOKED }))
          close()
        }, check.everyMs)
      }
    },
    cancel() {
      closed = true
      stop()
    },
  }, { highWaterMark: 1 })
}
