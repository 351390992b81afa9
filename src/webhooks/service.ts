import type { Db } from '../db/client'
import type { LogFields } from '../domain/log'
import { resolveHost, type ResolveHost } from '../egress/address-policy'
import type { StatusChange, TurnEndedPort } from '../session-record/ports'
import { WebhookSender } from './delivery'
import { WebhookOutbox } from './outbox'
import { webhookUrlProblem } from './url-policy'
import { type AttemptOutcome, CONCURRENCY, DeliveryWorker } from './worker'

export { INLINE_RESULT_BYTES } from './run-finished'
export { MAX_WEBHOOK_URL_LENGTH } from './url-policy'

export interface WebhookDeps {
  db: Db
  /** AGENTD_PUBLIC_URL: the base of `result_url`, `events_url` and `artifacts_url`. */
  publicUrl: string
  /** AGENTD_WEBHOOK_ALLOW_PRIVATE (tests only): http and private addresses allowed. */
  allowPrivate: boolean
  /** AGENTD_TIME_SCALE: multiplies the retry delays. */
  timeScale: number
  now?: () => number
  resolve?: ResolveHost
  /** How long a receiver has to answer with a 2xx (spec 6.2: 5 seconds). */
  ackTimeoutMs?: number
  log?: (line: string, fields?: LogFields) => void
  /** Each attempt's outcome as it is recorded (for /metrics). */
  onAttempt?: (outcome: AttemptOutcome) => void
}

/**
 * The `runFinished` webhook, as the rest of agentd sees it: the URL check for a key's webhook, the
 * outbox row written inside a turn's ending transaction, dropping a key's pending deliveries, a
 * key's delivery log, and the worker's start and stop. Its parts: the body (run-finished.ts), the
 * outbox (outbox.ts), the worker that retries on the spec's schedule (worker.ts), and one signed
 * POST and its record (delivery.ts).
 */
export class WebhookService implements TurnEndedPort {
  private readonly resolve: ResolveHost
  private readonly outbox: WebhookOutbox
  private readonly worker: DeliveryWorker

  constructor(private readonly deps: WebhookDeps) {
    const { db, allowPrivate } = deps
    const now = deps.now ?? Date.now
    this.resolve = deps.resolve ?? resolveHost
    this.outbox = new WebhookOutbox({ db, publicUrl: deps.publicUrl, now, enqueued: () => this.worker.wake() })
    const sender = new WebhookSender({ allowPrivate, resolve: this.resolve, now, ackTimeoutMs: deps.ackTimeoutMs, maxSockets: CONCURRENCY })
    this.worker = new DeliveryWorker({
      db,
      outbox: this.outbox,
      sender,
      timeScale: deps.timeScale,
      now,
      log: deps.log ?? console.error,
      onAttempt: deps.onAttempt,
    })
  }

  /** Why `url` cannot be a key's webhook (public https only, spec 4.5), or null. */
  urlProblem(url: string): Promise<string | null> {
    return webhookUrlProblem(url, this.deps.allowPrivate, this.resolve)
  }

  /** The TurnEndedPort: the outbox row, inside the transaction that ends the turn (see WebhookOutbox). */
  turnEnded(change: StatusChange): void {
    this.outbox.turnEnded(change)
  }

  /**
   * Drops a key's pending deliveries (key revoked, webhook cleared) and aborts attempts in flight.
   * Synchronous, so callers can run it inside their own transaction.
   */
  dropPending(keyId: string, reason: string): void {
    this.worker.dropPending(keyId, reason)
  }

  /** A key's deliveries, newest first, each with every attempt. */
  deliveriesOf(keyId: string, limit: number) {
    return this.outbox.deliveriesOf(keyId, limit)
  }

  /** Starts the worker: pending deliveries (also those left by a previous process) go out. */
  start(): void {
    this.worker.start()
  }

  /** Stops the worker, letting what is due go out until `deadline` (see DeliveryWorker.stop). */
  stop(deadline = 0): Promise<void> {
    return this.worker.stop(deadline)
  }
}
