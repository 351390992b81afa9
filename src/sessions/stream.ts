import { statusIn } from '../domain/status'
import type { StoredEvent } from '../session-record/event-log'
import type { SessionRow, SessionStore } from '../session-record/store'
import { answerOf, outputLine } from '../session-record/answer'

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

const endsTurnish = (event: StoredEvent) => event.kind === 'status' && statusIn('resting', String(event.data.status))

/** Where a followed session's stream goes: sse.ts frames it as server-sent events. */
export interface EventSink {
  event(event: StoredEvent): void
  /** A live batch all new to this reader: one chunk every reader shares. */
  batch(events: StoredEvent[]): void
  done(body: { status: string; output: string | null; result: unknown }): void
  error(message: string): void
  keepalive(): void
  /** How many chunks the reader has not taken yet. */
  behind(): number
  close(): void
}

/** Starts following into a sink; returns what stops it (the reader went away). */
export type FollowSession = (sink: EventSink) => () => void

/**
 * A session's event stream (spec 6.1): durable events after the cursor, then live ones as their
 * batches commit, without gap or duplicate; `done` once the session rests; keepalive while idle.
 * Subscribing before replaying closes the gap between the two.
 */
export function followSession(store: SessionStore, sessionId: string, options: StreamOptions): FollowSession {
  return (sink) => {
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
    let last = options.afterSeq
    let replaying = true
    const early: StoredEvent[] = []
    const close = () => {
      if (closed) return
      closed = true
      stop()
      sink.close()
    }
    const finishIfResting = (row: SessionRow | null) => {
      if (!row || !statusIn('resting', row.status)) return false
      sink.done({ status: row.status, output: outputLine(row), result: answerOf(row) })
      close()
      return true
    }
    const send = (events: StoredEvent[]) => {
      // The common case, a live batch all new to this reader with no rest in it, goes out as one
      // chunk that every reader shares.
      if (events.length > 1 && events[0]!.seq > last && !events.some(endsTurnish)) {
        sink.batch(events)
        last = events.at(-1)!.seq
        return
      }
      for (const event of events) {
        if (closed) return
        if (event.seq <= last) continue
        last = event.seq
        sink.event(event)
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
      if (sink.behind() > maxBuffered) {
        sink.error('This reader fell behind; reconnect with Last-Event-ID to resume')
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
    if (!closed) keepalive = setInterval(() => sink.keepalive(), options.keepaliveMs)
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
        sink.error(REVOKED)
        close()
      }, check.everyMs)
    }
    return () => {
      closed = true
      stop()
    }
  }
}
