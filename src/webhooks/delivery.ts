import http from 'node:http'
import https from 'node:https'
import { isIP } from 'node:net'
import { and, eq } from 'drizzle-orm'
import { Webhook } from 'standardwebhooks'
import type { Db } from '../db/client'
import { webhookAttempts, webhookDeliveries } from '../db/schema'
import { AddressRefused, checkedLookup, hostOf, isPublicAddress, type ResolveHost } from '../egress/address-policy'
import type { Delivery } from './outbox'

/** How long a receiver has to answer with a 2xx (spec 6.2: 5 seconds). */
const ACK_TIMEOUT_MS = 5_000

/** What the receiver answered to one POST, or why no answer counts. */
export interface ReceiverAnswer {
  statusCode: number | null
  latencyMs: number
  error: string | null
}

/** One attempt as it went out: to which URL, when, and what came back. */
export interface SentAttempt {
  url: string
  startedAt: number
  answer: ReceiverAnswer
}

export interface SenderDeps {
  /** AGENTD_WEBHOOK_ALLOW_PRIVATE (tests only): http and private addresses allowed. */
  allowPrivate: boolean
  resolve: ResolveHost
  now: () => number
  ackTimeoutMs?: number
  /** Connections kept per scheme: as many as the worker has attempts in flight. */
  maxSockets: number
}

/** Whether the receiver took the delivery: a 2xx, and nothing else (a 3xx is not followed). */
export const acknowledged = (answer: ReceiverAnswer) => answer.statusCode !== null && answer.statusCode >= 200 && answer.statusCode < 300

/**
 * One delivery attempt: the body signed with `standardwebhooks` and POSTed once, over kept-alive
 * connections whose addresses are checked as each is made.
 */
export class WebhookSender {
  /** Resolves and checks a receiver's name as each connection is made. */
  private readonly lookup: ReturnType<typeof checkedLookup>
  private readonly agents: { http: http.Agent; https: https.Agent }

  constructor(private readonly deps: SenderDeps) {
    this.lookup = checkedLookup({ resolve: deps.resolve, allowPrivate: deps.allowPrivate })
    this.agents = {
      http: new http.Agent({ keepAlive: true, maxSockets: deps.maxSockets }),
      https: new https.Agent({ keepAlive: true, maxSockets: deps.maxSockets }),
    }
  }

  /**
   * Signs the delivery's frozen body for this attempt (its id, this moment, the body) with the
   * key's webhook secret, and POSTs it to the key's URL as it is now.
   */
  async send(delivery: Delivery, target: { url: string; secret: string }, signal: AbortSignal): Promise<SentAttempt> {
    const startedAt = this.deps.now()
    const signature = new Webhook(target.secret).sign(delivery.id, new Date(startedAt), delivery.body)
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'agentd-webhooks/1',
      'webhook-id': delivery.id,
      'webhook-timestamp': String(Math.floor(startedAt / 1000)),
      'webhook-signature': signature,
    }
    const answer = await this.post(target.url, headers, delivery.body, signal)
    return { url: target.url, startedAt, answer }
  }

  /** Closes the kept-alive connections (the worker has stopped). */
  close(): void {
    this.agents.http.destroy()
    this.agents.https.destroy()
  }

  /**
   * One POST. The address is checked when the connection is made (the `lookup` hook), so a name
   * that resolved to a public address when the URL was set cannot be rebound to an inside one.
   * Redirects are never followed: a 3xx is a failed attempt.
   */
  private post(rawUrl: string, headers: Record<string, string>, body: string, signal: AbortSignal): Promise<ReceiverAnswer> {
    const started = performance.now()
    const timeoutMs = this.deps.ackTimeoutMs ?? ACK_TIMEOUT_MS
    return new Promise<ReceiverAnswer>((resolve) => {
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

/**
 * The attempt's record: its row in `webhook_attempts` and the delivery's new state (`next`: delivered,
 * failed, or when to try again), in one transaction. A delivery dropped meanwhile stays dropped;
 * the attempt is still on record.
 */
export function recordAttempt(db: Db, delivery: Delivery, attempt: number, sent: SentAttempt, next: Partial<Delivery>): void {
  db.transaction(() => {
    db.insert(webhookAttempts)
      .values({ deliveryId: delivery.id, attempt, attemptedAt: sent.startedAt, url: sent.url, ...sent.answer })
      .onConflictDoNothing()
      .run()
    db.update(webhookDeliveries)
      .set({ attempts: attempt, ...next })
      .where(and(eq(webhookDeliveries.id, delivery.id), eq(webhookDeliveries.state, 'pending')))
      .run()
  })
}
