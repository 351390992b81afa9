import { and, eq, lt } from 'drizzle-orm'
import type { Db } from '../db/client'
import { idempotencyKeys } from '../db/schema'
import { conflict } from '../domain/errors'
import type { SessionStatus } from '../domain/status'
import { callerOf, type Principal } from '../identity/service'

/**
 * `Idempotency-Key` on session create (contract section 8): the same caller, org, key and body
 * answer with the session first made, until that session failed or was cancelled; another body
 * under the key is 409 `IDEMPOTENCY_CONFLICT`. Rows are kept `retentionMs` (24 hours, scaled by
 * AGENTD_TIME_SCALE). The decision and the session's insert share one synchronous transaction,
 * so concurrent identical creates make exactly one session; the table's primary key holds it for
 * any other writer too.
 */

/** Statuses after which the key starts a new session instead of answering with the old one. */
const RETRYABLE: readonly SessionStatus[] = ['failed', 'cancelled']

/** A key's scope: the org and the caller (the API key when there is one, else the signed-in user). */
export interface IdempotencyScope {
  orgId: string
  caller: string
}

export function scopeOf(principal: Principal, orgId: string): IdempotencyScope {
  return { orgId, caller: callerOf(principal) }
}

export class IdempotencyKeys {
  constructor(
    private readonly db: Db,
    private readonly retentionMs: number,
    private readonly now: () => number,
  ) {}

  /**
   * The session this key already names, for a replay; null when the key is free (never used,
   * expired, or its session failed or was cancelled). 409 when the key was used with another body.
   * `statusOf` reads the named session's status (null once it is gone).
   */
  replay(scope: IdempotencyScope, key: string, digest: string, statusOf: (sessionId: string) => SessionStatus | null): string | null {
    const row = this.db
      .select()
      .from(idempotencyKeys)
      .where(and(eq(idempotencyKeys.orgId, scope.orgId), eq(idempotencyKeys.caller, scope.caller), eq(idempotencyKeys.key, key)))
      .get()
    if (!row || row.createdAt <= this.now() - this.retentionMs) return null
    if (row.bodyDigest !== digest) throw conflict('This Idempotency-Key was used with another request body', 'IDEMPOTENCY_CONFLICT')
    const status = statusOf(row.sessionId)
    return status === null || RETRYABLE.includes(status) ? null : row.sessionId
  }

  /** Names `sessionId` as the key's session; call inside the transaction that inserts the session. */
  claim(scope: IdempotencyScope, key: string, digest: string, sessionId: string): void {
    const row = { ...scope, key, bodyDigest: digest, sessionId, createdAt: this.now() }
    this.db
      .insert(idempotencyKeys)
      .values(row)
      .onConflictDoUpdate({
        target: [idempotencyKeys.orgId, idempotencyKeys.caller, idempotencyKeys.key],
        set: { bodyDigest: digest, sessionId, createdAt: row.createdAt },
      })
      .run()
  }

  /** Removes rows past the retention; the server calls it periodically. */
  sweep(): void {
    this.db
      .delete(idempotencyKeys)
      .where(lt(idempotencyKeys.createdAt, this.now() - this.retentionMs))
      .run()
  }
}
