import { and, asc, desc, eq, gt, inArray, lte, min } from 'drizzle-orm'
import type { Db } from '../db/client'
import { apiKeys, orgs, sessions, webhookAttempts, webhookDeliveries } from '../db/schema'
import { isLive } from '../domain/api-keys'
import type { StatusChange, TurnEndedPort } from '../session-record/ports'
import { runFinishedBody } from './run-finished'

/** One outbox row: a turn's end, to be told to one key's webhook. */
export type Delivery = typeof webhookDeliveries.$inferSelect

export interface OutboxDeps {
  db: Db
  /** AGENTD_PUBLIC_URL: the base of the body's `result_url`, `events_url` and `artifacts_url`. */
  publicUrl: string
  now: () => number
  /** A row was written; called once the transaction that wrote it is over, to send it soon. */
  enqueued: () => void
}

/** Pending and due at `now`. */
const dueAt = (now: number) => and(eq(webhookDeliveries.state, 'pending'), lte(webhookDeliveries.nextAttemptAt, now))

/**
 * The webhook outbox, `webhook_deliveries`: a row written inside the transaction that ends a turn,
 * so it exists exactly when the new status does and a rollback leaves nothing to send. Everything
 * a delivery needs is in its row (the URL and secret are read from the key at each attempt), which
 * is what makes the worker restart-safe: a new process picks the pending rows up.
 */
export class WebhookOutbox implements TurnEndedPort {
  constructor(private readonly deps: OutboxDeps) {}

  /**
   * The session actor calls this when a turn ends (the TurnEndedPort), inside the transaction that
   * commits the change. Writes a delivery when the run was started with a key that has a webhook,
   * unless the key is revoked or expired by then. Synchronous and opens no transaction of its own.
   */
  turnEnded({ row: before, to, patch }: StatusChange): void {
    if (!before.apiKeyId) return
    const { db } = this.deps
    const now = this.deps.now()
    const key = db.select().from(apiKeys).where(eq(apiKeys.id, before.apiKeyId)).get()
    if (!key || !key.webhookUrl || !isLive(key, now)) return
    // The row as this transaction leaves it: the turn's answer, cost and completed_at.
    const row = db.select().from(sessions).where(eq(sessions.id, before.id)).get() ?? before
    const org = db.select({ slug: orgs.slug }).from(orgs).where(eq(orgs.id, row.orgId)).get()
    // The turn's end: the completed_at the turn wrote, or the moment of this change (a cancel).
    const endedAt = patch.completedAt ?? row.updatedAt
    const body = runFinishedBody(row, to, org?.slug ?? row.orgId, this.deps.publicUrl, endedAt)
    db.insert(webhookDeliveries)
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
    queueMicrotask(() => this.deps.enqueued())
  }

  /**
   * Marks a key's pending deliveries dropped (key revoked, webhook cleared). Synchronous, so callers
   * can run it inside their own transaction. Attempts in flight are the worker's to abort.
   */
  dropPending(keyId: string, reason: string): void {
    this.deps.db
      .update(webhookDeliveries)
      .set({ state: 'dropped', reason, finishedAt: this.deps.now(), nextAttemptAt: null })
      .where(and(eq(webhookDeliveries.apiKeyId, keyId), eq(webhookDeliveries.state, 'pending')))
      .run()
  }

  /** Up to `limit` due deliveries, the longest due first. */
  due(now: number, limit: number): Delivery[] {
    return this.deps.db.select().from(webhookDeliveries).where(dueAt(now)).orderBy(asc(webhookDeliveries.nextAttemptAt)).limit(limit).all()
  }

  /** The ids of up to `limit` due deliveries (no bodies: asked often while stopping). */
  dueIds(now: number, limit: number): string[] {
    const rows = this.deps.db.select({ id: webhookDeliveries.id }).from(webhookDeliveries).where(dueAt(now)).limit(limit).all()
    return rows.map((d) => d.id)
  }

  /** When the next pending delivery not yet due falls due, or null when none waits. */
  nextDueAfter(now: number): number | null {
    const next = this.deps.db
      .select({ at: min(webhookDeliveries.nextAttemptAt) })
      .from(webhookDeliveries)
      .where(and(eq(webhookDeliveries.state, 'pending'), gt(webhookDeliveries.nextAttemptAt, now)))
      .get()
    return next?.at ?? null
  }

  /** Moves a delivery's next attempt to `at`, its other fields as they are. */
  postpone(id: string, at: number): void {
    this.deps.db.update(webhookDeliveries).set({ nextAttemptAt: at }).where(eq(webhookDeliveries.id, id)).run()
  }

  /** A key's deliveries, newest first, each with every attempt. */
  deliveriesOf(keyId: string, limit: number) {
    const { db } = this.deps
    const rows = db
      .select()
      .from(webhookDeliveries)
      .where(eq(webhookDeliveries.apiKeyId, keyId))
      .orderBy(desc(webhookDeliveries.createdAt), desc(webhookDeliveries.id))
      .limit(limit)
      .all()
    const ids = rows.map((r) => r.id)
    const attempts = ids.length
      ? db.select().from(webhookAttempts).where(inArray(webhookAttempts.deliveryId, ids)).orderBy(asc(webhookAttempts.attempt)).all()
      : []
    return rows.map((row) => ({ ...row, attemptRows: attempts.filter((a) => a.deliveryId === row.id) }))
  }
}
