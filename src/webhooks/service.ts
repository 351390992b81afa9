import http from 'node:http'
import https from 'node:https'
import { isIP } from 'node:net'
import { and, asc, desc, eq, gt, inArray, lte, min } from 'drizzle-orm'
import { Webhook } from 'standardwebhooks'
import type { Db } from '../db/client'
import { apiKeys, orgs, sessions, webhookAttempts, webhookDeliveries } from '../db/schema'
import type { SessionStatus } from '../domain/status'
import type { LogFields } from '../domain/log'
import type { StatusChange, TurnEndedPort } from '../session-record/ports'
import type { SessionRow } from '../session-record/store'
import { answerOf } from '../session-record/answer'
import { AddressRefused, checkedLookup, hostOf, isPublicAddress, resolveHost, type ResolveHost } from '../egress/address-policy'
import { webhookUrlProblem } from './url-policy'
import { isLive } from '../domain/api-keys'

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
  onAttempt?: (outcome: 'delivered' | 'retrying' | 'failed') => void
}

/** Retries at 2, 4 and 6 minutes after the first attempt (spec 6.2), before scaling. */
export const RETRY_OFFSETS_MS = [2 * 60_000, 4 * 60_000, 6 * 60_000]
export const MAX_ATTEMPTS = RETRY_OFFSETS_MS.length + 1
/** A result whose JSON is larger is sent as null; the receiver reads `result_url` (spec 8). */
export const INLINE_RESULT_BYTES = 16 * 1024
const ACK_TIMEOUT_MS = 5_000
const CONCURRENCY = 64

const TYPE_OF: Partial<Record<SessionStatus, { type: string; status: string }>> = {
  completed: { type: 'run.completed', status: 'completed' },
  needs_review: { type: 'run.completed', status: 'needs_review' },
  // The turn ended normally; the interactive session now waits for a follow-up. The body's status
  // stays within the spec's four values.
  input_required: { type: 'run.completed', status: 'completed' },
  failed: { type: 'run.failed', status: 'failed' },
  cancelled: { type: 'run.cancelled', status: 'cancelled' },
}

/**
 * How a turn ended, for the webhook: the session's new status, or, when the session moved straight
 * on (a queued follow-up started, or it is parked), what the committed row says of the turn.
 */
function turnStatus(row: SessionRow, to: SessionStatus): SessionStatus {
  if (TYPE_OF[to]) return to
  if (row.error) return 'failed'
  if (row.outputSchema && row.schemaValid !== true) return 'needs_review'
  return 'completed'
}

type Delivery = typeof webhookDeliveries.$inferSelect

/** The `runFinished` body (spec 6.2) for a session row as committed at the end of its turn. */
export function runFinishedBody(row: SessionRow, to: SessionStatus, orgSlug: string, publicUrl: string, endedAt: number) {
  const mapped = TYPE_OF[turnStatus(row, to)]!
  const base = `${publicUrl}/o/${encodeURIComponent(orgSlug)}/p/${row.projectId ?? '_'}/sessions/${row.id}`
  const result = answerOf(row)
  const inline = result !== null && Buffer.byteLength(JSON.stringify(result)) <= INLINE_RESULT_BYTES ? result : null
  return {
    type: mapped.type,
    timestamp: new Date(endedAt).toISOString(),
    data: {
      run_id: row.id,
      project_id: row.projectId,
      status: mapped.status,
      result: inline,
      total_cost_usd: row.totalCostUsd,
      result_url: `${base}/result`,
      events_url: `${base}/events`,
      artifacts_url: `${base}/artifacts`,
      // Beyond spec 6.2's fields: what the turn pushed to its repository (issue 18), null otherwise.
      branch: row.branch,
      pr_url: row.prUrl,
    },
  }
}

interface Answer {
  statusCode: number | null
  latencyMs: number
  error: string | null
}

/**
 * The `runFinished` webhook: the outbox row written inside a status change's transaction, and
 * the worker that posts it, signed with `standardwebhooks`, retrying on the spec's schedule.
 * Restart-safe: everything it needs is in `webhook_deliveries`; `start()` picks pending rows up.
 */
export class WebhookService implements TurnEndedPort {
  private readonly now: () => number
  private readonly resolve: ResolveHost
  /** Resolves and checks a receiver's name as each connection is made. */
  private readonly lookup: ReturnType<typeof checkedLookup>
  private readonly log: (line: string, fields?: LogFields) => void
  private readonly agents = {
    http: new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY }),
    https: new https.Agent({ keepAlive: true, maxSockets: CONCURRENCY }),
  }
  private readonly inFlight = new Map<string, { keyId: string; abort: AbortController; done: Promise<void> }>()
  private timer: ReturnType<typeof setTimeout> | null = null
  private timerAt = Infinity
  private started = false

  constructor(private readonly deps: WebhookDeps) {
    this.now = deps.now ?? Date.now
    this.resolve = deps.resolve ?? resolveHost
    this.lookup = checkedLookup({ resolve: this.resolve, allowPrivate: deps.allowPrivate })
    this.log = deps.log ?? console.error
  }

  /** Why `url` cannot be a key's webhook (public https only, spec 4.5), or null. */
  urlProblem(url: string): Promise<string | null> {
    return webhookUrlProblem(url, this.deps.allowPrivate, this.resolve)
  }

  /**
   * The session actor calls this when a turn ends (the TurnEndedPort), inside the
   * transaction that commits the change, so the outbox row exists exactly when the new status
   * does. Writes a delivery when the run was started with a key that has a webhook, unless the key
   * is revoked or expired by then. Synchronous and opens no transaction of its own.
   */
  turnEnded({ row: before, to, patch }: StatusChange): void {
    if (!before.apiKeyId) return
    const now = this.now()
    const key = this.deps.db.select().from(apiKeys).where(eq(apiKeys.id, before.apiKeyId)).get()
    if (!key || !key.webhookUrl || !isLive(key, now)) return
    // The row as this transaction leaves it: the turn's answer, cost and completed_at.
    const row = this.deps.db.select().from(sessions).where(eq(sessions.id, before.id)).get() ?? before
    const org = this.deps.db.select({ slug: orgs.slug }).from(orgs).where(eq(orgs.id, row.orgId)).get()
    // The turn's end: the completed_at the turn wrote, or the moment of this change (a cancel).
    const endedAt = patch.completedAt ?? row.updatedAt
    const body = runFinishedBody(row, to, org?.slug ?? row.orgId, this.deps.publicUrl, endedAt)
    this.deps.db
      .insert(webhookDeliveries)
      .values({
        id: `webhook:${row.id}:${endedAt}`,
        apiKeyId: key.id,
        sessionId: row.id,
        type: body.type,
        body: JSON.stringify(body),
        state: 'pending',
        nextAttemptAt: now,
        createdAt: now,
      })
      .onConflictDoNothing()
      .run()
    // Runs after the surrounding transaction commits (after a rollback there is nothing to send).
    queueMicrotask(() => this.wake())
  }

  /**
   * Drops a key's pending deliveries (key revoked, webhook cleared) and aborts attempts in flight.
   * Synchronous, so callers can run it inside their own transaction.
   */
  dropPending(keyId: string, reason: string): void {
    this.deps.db
      .update(webhookDeliveries)
      .set({ state: 'dropped', reason, finishedAt: this.now(), nextAttemptAt: null })
      .where(and(eq(webhookDeliveries.apiKeyId, keyId), eq(webhookDeliveries.state, 'pending')))
      .run()
    for (const attempt of this.inFlight.values()) if (attempt.keyId === keyId) attempt.abort.abort(new Error(reason))
  }

  /** A key's deliveries, newest first, each with every attempt. */
  deliveriesOf(keyId: string, limit: number) {
    const rows = this.deps.db
      .select()
      .from(webhookDeliveries)
      .where(eq(webhookDeliveries.apiKeyId, keyId))
      .orderBy(desc(webhookDeliveries.createdAt), desc(webhookDeliveries.id))
      .limit(limit)
      .all()
    const ids = rows.map((r) => r.id)
    const attempts = ids.length
      ? this.deps.db.select().from(webhookAttempts).where(inArray(webhookAttempts.deliveryId, ids)).orderBy(asc(webhookAttempts.attempt)).all()
      : []
    return rows.map((row) => ({ ...row, attemptRows: attempts.filter((a) => a.deliveryId === row.id) }))
  }

  /** Starts the worker: pending deliveries (also those left by a previous process) go out. */
  start(): void {
    this.started = true
    this.schedule(0)
  }

  /**
   * Stops the worker. Until `deadline` (ms since the epoch; none by default) what is due goes out
   * first, the ends of the last turns among them, and attempts in flight are let finish; whatever
   * is still in flight then is aborted, not recorded, and redone by the next process.
   */
  async stop(deadline = 0): Promise<void> {
    while (this.started && Date.now() < deadline && (this.inFlight.size > 0 || this.dueNow())) {
      this.pump()
      await Promise.race([...[...this.inFlight.values()].map((a) => a.done), Bun.sleep(Math.max(0, Math.min(100, deadline - Date.now())))])
    }
    this.started = false
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    for (const attempt of this.inFlight.values()) attempt.abort.abort(new Error('agentd is stopping'))
    await Promise.allSettled([...this.inFlight.values()].map((a) => a.done))
    this.agents.http.destroy()
    this.agents.https.destroy()
  }

  /** Whether a delivery not in flight is due now. */
  private dueNow(): boolean {
    const due = and(eq(webhookDeliveries.state, 'pending'), lte(webhookDeliveries.nextAttemptAt, this.now()))
    return this.deps.db.select({ id: webhookDeliveries.id }).from(webhookDeliveries).where(due).limit(CONCURRENCY + 1).all().some((d) => !this.inFlight.has(d.id))
  }

  /** Looks for due deliveries now (a new outbox row, a finished attempt). */
  wake(): void {
    this.schedule(0)
  }

  private schedule(delayMs: number): void {
    if (!this.started) return
    const at = this.now() + Math.max(0, delayMs)
    if (this.timer && this.timerAt <= at) return
    if (this.timer) clearTimeout(this.timer)
    this.timerAt = at
    this.timer = setTimeout(() => {
      this.timer = null
      this.timerAt = Infinity
      this.pump()
    }, Math.max(0, delayMs))
  }

  private pump(): void {
    if (!this.started) return
    const now = this.now()
    const free = CONCURRENCY - this.inFlight.size
    if (free > 0) {
      const due = this.deps.db
        .select()
        .from(webhookDeliveries)
        .where(and(eq(webhookDeliveries.state, 'pending'), lte(webhookDeliveries.nextAttemptAt, now)))
        .orderBy(asc(webhookDeliveries.nextAttemptAt))
        .limit(free + this.inFlight.size)
        .all()
        .filter((d) => !this.inFlight.has(d.id))
        .slice(0, free)
      for (const delivery of due) this.begin(delivery)
    }
    // The next retry that falls due; a finished attempt wakes the worker for the rest.
    const next = this.deps.db
      .select({ at: min(webhookDeliveries.nextAttemptAt) })
      .from(webhookDeliveries)
      .where(and(eq(webhookDeliveries.state, 'pending'), gt(webhookDeliveries.nextAttemptAt, now)))
      .get()
    if (next?.at != null) this.schedule(next.at - now)
  }

  private begin(delivery: Delivery): void {
    const abort = new AbortController()
    const entry = { keyId: delivery.apiKeyId, abort, done: Promise.resolve() }
    this.inFlight.set(delivery.id, entry)
    entry.done = this.attempt(delivery, abort.signal)
      .catch((err) => {
        // A bug or a database error, not the receiver's answer: try again in a while, not in a loop.
        this.log(`agentd: webhook ${delivery.id}: ${(err as Error).message}`)
        try {
          this.deps.db.update(webhookDeliveries).set({ nextAttemptAt: this.now() + 5_000 }).where(eq(webhookDeliveries.id, delivery.id)).run()
        } catch {}
      })
      .finally(() => {
        this.inFlight.delete(delivery.id)
        this.wake()
      })
  }

  private async attempt(delivery: Delivery, signal: AbortSignal): Promise<void> {
    const key = this.deps.db.select().from(apiKeys).where(eq(apiKeys.id, delivery.apiKeyId)).get()
    if (!key || key.revokedAt !== null || !key.webhookUrl || !key.webhookSecret) {
      this.dropPending(delivery.apiKeyId, key?.revokedAt ? 'key revoked' : 'webhook cleared')
      return
    }
    const startedAt = this.now()
    const signature = new Webhook(key.webhookSecret).sign(delivery.id, new Date(startedAt), delivery.body)
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'agentd-webhooks/1',
      'webhook-id': delivery.id,
      'webhook-timestamp': String(Math.floor(startedAt / 1000)),
      'webhook-signature': signature,
    }
    const answer = await this.post(key.webhookUrl, headers, delivery.body, signal)
    // Stopping: this attempt is not recorded and is redone by the next process.
    if (!this.started) return
    this.record(delivery, key.webhookUrl, startedAt, answer)
  }

  private record(delivery: Delivery, url: string, startedAt: number, answer: Answer): void {
    const attempt = delivery.attempts + 1
    const firstAttemptAt = delivery.firstAttemptAt ?? startedAt
    const ok = answer.statusCode !== null && answer.statusCode >= 200 && answer.statusCode < 300
    const now = this.now()
    let next: Partial<Delivery>
    if (ok) next = { state: 'delivered', finishedAt: now, nextAttemptAt: null, reason: null }
    else if (attempt >= MAX_ATTEMPTS) next = { state: 'failed', finishedAt: now, nextAttemptAt: null, reason: `no 2xx after ${attempt} attempts` }
    else next = { nextAttemptAt: firstAttemptAt + Math.round(RETRY_OFFSETS_MS[attempt - 1]! * this.deps.timeScale) }
    const outcome = ok ? 'delivered' : next.state === 'failed' ? 'failed' : 'retrying'
    this.deps.onAttempt?.(outcome)
    // One line per attempt, so an operator can see why a webhook is missing (the URL is not logged: it may hold a token).
    this.log(`webhook attempt ${attempt} of ${delivery.id}: ${answer.statusCode ?? answer.error} in ${answer.latencyMs} ms (${outcome})`, {
      session: delivery.sessionId,
      delivery: delivery.id,
      attempt,
      status: answer.statusCode,
      duration_ms: answer.latencyMs,
      outcome,
      ...(answer.error ? { error: answer.error } : {}),
    })
    this.deps.db.transaction(() => {
      this.deps.db
        .insert(webhookAttempts)
        .values({ deliveryId: delivery.id, attempt, attemptedAt: startedAt, url, ...answer })
        .onConflictDoNothing()
        .run()
      // A delivery dropped meanwhile stays dropped; the attempt is still on record.
      this.deps.db
        .update(webhookDeliveries)
        .set({ attempts: attempt, firstAttemptAt, ...next })
        .where(and(eq(webhookDeliveries.id, delivery.id), eq(webhookDeliveries.state, 'pending')))
        .run()
    })
  }

  /**
   * One POST. The address is checked when the connection is made (the `lookup` hook), so a name
   * that resolved to a public address when the URL was set cannot be rebound to an inside one.
   * Redirects are never followed: a 3xx is a failed attempt.
   */
  private post(rawUrl: string, headers: Record<string, string>, body: string, signal: AbortSignal): Promise<Answer> {
    const started = performance.now()
    const timeoutMs = this.deps.ackTimeoutMs ?? ACK_TIMEOUT_MS
    return new Promise<Answer>((resolve) => {
      let request: http.ClientRequest | undefined
      let timer: ReturnType<typeof setTimeout> | undefined
      let settled = false
      const finish = (statusCode: number | null, error: string | null) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        signal.removeEventListener('abort', onAbort)
        resolve({ statusCode, error, latencyMs: Math.round(performance.now() - started) })
      }
      const fail = (error: string) => {
        finish(null, error)
        request?.destroy()
      }
      const onAbort = () => fail(`aborted: ${(signal.reason as Error | undefined)?.message ?? 'aborted'}`)
      try {
        const url = new URL(rawUrl)
        const host = hostOf(url)
        const secure = url.protocol === 'https:'
        // A URL set while AGENTD_WEBHOOK_ALLOW_PRIVATE was on is checked again without it.
        if (!this.deps.allowPrivate && !secure) return fail('refused: not an https URL')
        if (!this.deps.allowPrivate && isIP(host) && !isPublicAddress(host)) return fail(`refused: ${host} is not a public address`)
        timer = setTimeout(() => fail(`no answer within ${timeoutMs / 1000} s`), timeoutMs)
        signal.addEventListener('abort', onAbort)
        request = (secure ? https : http).request(
          {
            protocol: url.protocol,
            host,
            port: url.port || (secure ? 443 : 80),
            path: `${url.pathname}${url.search}`,
            method: 'POST',
            agent: secure ? this.agents.https : this.agents.http,
            headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
            ...(secure && !isIP(host) ? { servername: host } : {}),
            lookup: this.lookup,
          },
          (res) => {
            res.resume()
            const code = res.statusCode ?? null
            finish(code, code !== null && code >= 300 && code < 400 ? `redirect refused (to ${res.headers.location ?? 'nowhere'})` : null)
          },
        )
        request.on('error', (err) => fail(err instanceof AddressRefused ? `refused: ${err.message}` : err.message))
        request.end(body)
      } catch (err) {
        fail((err as Error).message)
      }
    })
  }
}

