import { index, integer, real, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import { ownedBy } from './columns'
import { orgs } from './identity'

/**
 * What an org used, one row per metered stretch (contract section 9): a turn's tokens and spend
 * when it ends, and the sandbox running time of each stretch a turn ran (a pause ends one). Plan
 * periods are sums over `at`, so a new month or ISO week starts from nothing without a reset.
 * The session is kept by id only: usage outlives whatever happens to the session's row.
 */
export const usageRecords = sqliteTable(
  'usage_records',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    orgId: ownedBy('org_id', () => orgs.id),
    sessionId: text('session_id').notNull(),
    /** When the stretch ended (ms since the epoch): the period it counts in. */
    at: integer('at').notNull(),
    tokens: integer('tokens').notNull().default(0),
    spendUsd: real('spend_usd').notNull().default(0),
    computeMs: integer('compute_ms').notNull().default(0),
  },
  (table) => [index('usage_records_org_at_idx').on(table.orgId, table.at)],
)
