import { and, gt, isNull, or, type SQL } from 'drizzle-orm'
import { apiKeys } from '../db/schema'

/**
 * The keys that still count at `now` (not revoked, not expired), as a query's condition. The same
 * rule for a row in hand is `isLive` in src/domain/api-keys.ts; change the two together.
 */
export function liveKeys(now: number): SQL {
  return and(isNull(apiKeys.revokedAt), or(isNull(apiKeys.expiresAt), gt(apiKeys.expiresAt, now)))!
}
