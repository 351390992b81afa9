// What an API key is, as every layer needs it: the identity check, the HTTP scope check, the key
// service, webhooks and the schema's column type all read these, so they sit below all of them.

/** What a key may be granted (spec 2.10): read runs, and start or steer them. */
export const API_KEY_SCOPES = ['runs:read', 'runs:write'] as const
export type ApiKeyScope = (typeof API_KEY_SCOPES)[number]

/** Every key secret starts with this fixed live-key prefix (spec 2.10). */
export const API_KEY_PREFIX = 'sk_live_'

/**
 * Whether an API key still counts: not revoked and not expired at `now`, for a row in hand. The
 * same rule as a query's condition is `liveKeys` in src/api-keys/live.ts: it names the table's
 * columns, and the domain imports nothing of the db. Change the two together.
 */
export function isLive(key: { revokedAt: number | null; expiresAt: number | null }, now: number): boolean {
  return key.revokedAt === null && (key.expiresAt === null || key.expiresAt > now)
}
