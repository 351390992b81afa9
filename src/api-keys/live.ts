import { and, gt, isNull, or, type SQL } from 'drizzle-orm'
import { apiKeys } from '../db/schema'

/**
 * Whether an API key still counts: not revoked and not expired at `now`. The one statement of the
 * rule, for a row in hand (`isLive`) and for a query (`liveKeys`).
 */
export function isLive(key: { revokedAt: number | null; expiresAt: number | null }, now: number): boolean {
  return key.revokedAt === null && (key.expiresAt === null || key.expiresAt > now)
}

export function liveKeys(now: number): SQL {
  return and(isNull(apiKeys.revokedAt), or(isNull(apiKeys.expiresAt), gt(apiKeys.expiresAt, now)))!
}
