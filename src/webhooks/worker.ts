import { eq } from 'drizzle-orm'
import type { Db } from '../db/client'
import { apiKeys } from '../db/schema'
import type { LogFields } from '../domain/log'
import { acknowledged, recordAttempt, type SentAttempt, type WebhookSender } from './delivery'
import type { Delivery, WebhookOutbox } from './outbox'

/** Retries at 2, 4 and 6 minutes after the first attempt (spec 6.2), before scaling. */
export const RETRY_OFFSETS_MS = [2 * 60_000, 4 * 60_000, 6 * 60_000]
export const MAX_ATTEMPTS = RETRY_OFFSETS_MS.length + 1
/** Attempts in flight at once; the sender keeps as many connections per scheme. */
export const CONCURRENCY = 64
/** After an error that is not the receiver's answer (a bug, the database), the next try. */
const AFTER_ERROR_MS = 5_000

export type AttemptOutcome = 'delivered' | 'retrying' | 'failed'

export interface WorkerDeps {
  db: Db
  outbox: WebhookOutbox
  sender: WebhookSender
  /** AGENTD_TIME_SCALE: multiplies the retry delays. */
  timeScale: number
  now: () => number
  log: (line: string, fields?: LogFields) => void
  onAttempt?: (outcome: AttemptOutcome) => void
}

/**
 * A delivery's state after its `attempt`-th attempt: delivered on a 2xx, failed after the last
 * one, else due again on the schedule, counted from the first attempt (not this one).
 */
function afterAttempt(ok: boolean, attempt: number, firstAttemptAt: number, now: number, timeScale: number): Partial<Delivery> {
  if (ok) return { state: 'delivered', finishedAt: now, nextAttemptAt: null, reason: null }
  if (attempt >= MAX_ATTEMPTS) return { state: 'failed', finishedAt: now, nextAttemptAt: null, reason: `no 2xx after ${attempt} attempts` }
  return { nextAttemptAt: firstAttemptAt + Math.round(RETRY_OFFSETS_MS[attempt - 1]! * timeScale) }
}

/**
 * The loop that sends the outbox: picks the due deliveries (up to CONCURRENCY in flight), sleeps
 * until the next retry falls due, and is woken by a new row or a finished attempt. Each answer
 * decides the delivery's next state: delivered, failed after MAX_ATTEMPTS, or retried on the
 * spec's schedule.
 */
export class DeliveryWorker {
  private readonly inFlight = new Map<string, { keyId: string; abort: AbortController; done: Promise<void> }>()
  private timer: ReturnType<typeof setTimeout> | null = null
  private timerAt = Infinity
  private started = false

  constructor(private readonly deps: WorkerDeps) {}

  /** Starts the loop: pending deliveries (also those left by a previous process) go out. */
  start(): void {
    this.started = true
    this.schedule(0)
  }

  /**
   * Stops the loop. Until `deadline` (ms since the epoch; none by default) what is due goes out
   * first, the ends of the last turns among them, and attempts in flight are let finish; whatever
   * is still in flight then is aborted, not recorded, and redone by the next process.
   */
  async stop(deadline = 0): Promise<void> {
    while (this.started && Date.now() < deadline && (this.inFlight.size > 0 || this.dueNow())) {
      this.pump()
      const left = Math.max(0, Math.min(100, deadline - Date.now()))
      await Promise.race([...[...this.inFlight.values()].map((a) => a.done), Bun.sleep(left)])
    }
    this.started = false
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    for (const attempt of this.inFlight.values()) attempt.abort.abort(new Error('agentd is stopping'))
    await Promise.allSettled([...this.inFlight.values()].map((a) => a.done))
    this.deps.sender.close()
  }

  /** Looks for due deliveries now (a new outbox row, a finished attempt). */
  wake(): void {
    this.schedule(0)
  }

  /**
   * Drops a key's pending deliveries (key revoked, webhook cleared) and aborts its attempts in
   * flight. Synchronous, so callers can run it inside their own transaction.
   */
  dropPending(keyId: string, reason: string): void {
    this.deps.outbox.dropPending(keyId, reason)
    for (const attempt of this.inFlight.values()) if (attempt.keyId === keyId) attempt.abort.abort(new Error(reason))
  }

  /** Whether a delivery not in flight is due now. */
  private dueNow(): boolean {
    return this.deps.outbox.dueIds(this.deps.now(), CONCURRENCY + 1).some((id) => !this.inFlight.has(id))
  }

  private schedule(delayMs: number): void {
    if (!this.started) return
    const at = this.deps.now() + Math.max(0, delayMs)
    if (this.timer && this.timerAt <= at) return
    if (this.timer) clearTimeout(this.timer)
    this.timerAt = at
    this.timer = setTimeout(
      () => {
        this.timer = null
        this.timerAt = Infinity
        this.pump()
      },
      Math.max(0, delayMs),
    )
  }

  private pump(): void {
    if (!this.started) return
    const now = this.deps.now()
    const free = CONCURRENCY - this.inFlight.size
    if (free > 0) {
      const due = this.deps.outbox
        .due(now, free + this.inFlight.size)
        .filter((d) => !this.inFlight.has(d.id))
        .slice(0, free)
      for (const delivery of due) this.begin(delivery)
    }
    // The next retry that falls due; a finished attempt wakes the worker for the rest.
    const next = this.deps.outbox.nextDueAfter(now)
    if (next !== null) this.schedule(next - now)
  }

  private begin(delivery: Delivery): void {
    const abort = new AbortController()
    const entry = { keyId: delivery.apiKeyId, abort, done: Promise.resolve() }
    this.inFlight.set(delivery.id, entry)
    entry.done = this.attempt(delivery, abort.signal)
      .catch((err) => {
        // A bug or a database error, not the receiver's answer: try again in a while, not in a loop.
        this.deps.log(`agentd: webhook ${delivery.id}: ${(err as Error).message}`)
        try {
          this.deps.outbox.postpone(delivery.id, this.deps.now() + AFTER_ERROR_MS)
        } catch {}
      })
      .finally(() => {
        this.inFlight.delete(delivery.id)
        this.wake()
      })
  }

  private async attempt(delivery: Delivery, signal: AbortSignal): Promise<void> {
    // The URL and secret as the key has them now: a changed URL or rotated secret applies to retries.
    const key = this.deps.db.select().from(apiKeys).where(eq(apiKeys.id, delivery.apiKeyId)).get()
    if (!key || key.revokedAt !== null || !key.webhookUrl || !key.webhookSecret) {
      this.dropPending(delivery.apiKeyId, key?.revokedAt ? 'key revoked' : 'webhook cleared')
      return
    }
    const sent = await this.deps.sender.send(delivery, { url: key.webhookUrl, secret: key.webhookSecret }, signal)
    // Stopping: this attempt is not recorded and is redone by the next process.
    if (!this.started) return
    this.settle(delivery, sent)
  }

  /** What the answer makes of the delivery (delivered, failed, or retried on the schedule), logged and recorded. */
  private settle(delivery: Delivery, sent: SentAttempt): void {
    const { answer } = sent
    const attempt = delivery.attempts + 1
    const firstAttemptAt = delivery.firstAttemptAt ?? sent.startedAt
    const ok = acknowledged(answer)
    const next = afterAttempt(ok, attempt, firstAttemptAt, this.deps.now(), this.deps.timeScale)
    const outcome: AttemptOutcome = ok ? 'delivered' : next.state === 'failed' ? 'failed' : 'retrying'
    this.deps.onAttempt?.(outcome)
    // One line per attempt, so an operator can see why a webhook is missing (the URL is not logged: it may hold a token).
    this.deps.log(
      `webhook attempt ${attempt} of ${delivery.id}: ${answer.statusCode ?? answer.error} in ${answer.latencyMs} ms (${outcome})`,
      {
        session: delivery.sessionId,
        delivery: delivery.id,
        attempt,
        status: answer.statusCode,
        duration_ms: answer.latencyMs,
        outcome,
        ...(answer.error ? { error: answer.error } : {}),
      },
    )
    recordAttempt(this.deps.db, delivery, attempt, sent, { firstAttemptAt, ...next })
  }
}
