import { sql } from 'drizzle-orm'
import { check, index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import { orgs, users } from './identity'
import { sessions } from './sessions'
import { createdAt, ownedBy } from './columns'
import type { ApiKeyScope } from '../../domain/api-keys'

/**
 * Org API keys (spec 2.10). Only the SHA-256 of the secret is kept; `prefix` (the secret's first
 * characters) finds the candidate rows and is shown to admins. The webhook secret is an HMAC key
 * and has to be kept as is to sign with.
 */
export const apiKeys = sqliteTable(
  'api_keys',
  {
    id: text('id').primaryKey(),
    orgId: ownedBy('org_id', () => orgs.id),
    name: text('name').notNull(),
    prefix: text('prefix').notNull(),
    secretHash: text('secret_hash').notNull(),
    scopes: text('scopes', { mode: 'json' }).notNull().$type<ApiKeyScope[]>(),
    maxConcurrent: integer('max_concurrent').notNull(),
    webhookUrl: text('webhook_url'),
    webhookSecret: text('webhook_secret'),
    expiresAt: integer('expires_at'),
    createdByUserId: ownedBy('created_by_user_id', () => users.id),
    lastUsedAt: integer('last_used_at'),
    createdAt: createdAt(),
    revokedAt: integer('revoked_at'),
  },
  (table) => [index('api_keys_prefix_idx').on(table.prefix), index('api_keys_org_idx').on(table.orgId, table.createdAt)],
)

export const DELIVERY_STATES = ['pending', 'delivered', 'failed', 'dropped'] as const
export type DeliveryState = (typeof DELIVERY_STATES)[number]

/**
 * The webhook outbox: one row per finished turn of a key run, written in the transaction that
 * changes the session's status. `id` is the `webhook-id` header, so a turn is enqueued once.
 * `body` is frozen at enqueue time; the URL and secret are read from the key at each attempt.
 */
export const webhookDeliveries = sqliteTable(
  'webhook_deliveries',
  {
    id: text('id').primaryKey(),
    apiKeyId: ownedBy('api_key_id', () => apiKeys.id),
    sessionId: ownedBy('session_id', () => sessions.id),
    type: text('type').notNull(),
    body: text('body').notNull(),
    state: text('state', { enum: DELIVERY_STATES }).notNull(),
    attempts: integer('attempts').notNull().default(0),
    firstAttemptAt: integer('first_attempt_at'),
    nextAttemptAt: integer('next_attempt_at'),
    // Why a delivery ended without a 2xx: retries exhausted, key revoked, webhook cleared.
    reason: text('reason'),
    createdAt: createdAt(),
    finishedAt: integer('finished_at'),
  },
  (table) => [
    check('webhook_deliveries_state_check', sql`${table.state} in ('pending', 'delivered', 'failed', 'dropped')`),
    index('webhook_deliveries_due_idx').on(table.state, table.nextAttemptAt),
    index('webhook_deliveries_key_idx').on(table.apiKeyId, table.createdAt),
  ],
)

/** Every delivery attempt: what the receiver answered (or why nothing came) and how fast. */
export const webhookAttempts = sqliteTable(
  'webhook_attempts',
  {
    deliveryId: ownedBy('delivery_id', () => webhookDeliveries.id),
    attempt: integer('attempt').notNull(),
    attemptedAt: integer('attempted_at').notNull(),
    url: text('url').notNull(),
    statusCode: integer('status_code'),
    latencyMs: integer('latency_ms').notNull(),
    error: text('error'),
  },
  (table) => [primaryKey({ columns: [table.deliveryId, table.attempt] })],
)
