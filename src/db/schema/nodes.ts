import { integer, sqliteTable, text } from 'drizzle-orm/sqlite-core'

/**
 * The agentd nodes of a region (contract section 12): each records where its agentd answers when
 * it starts, through the primary (the only writer). The row with the latest `primarySince` is the
 * primary's: a replica forwards writes to its `url`. `heardAt` moves with each node's heartbeat.
 */
export const nodes = sqliteTable('nodes', {
  name: text('name').primaryKey(),
  url: text('url').notNull(),
  /** AGENTD_MAX_SANDBOXES of that node. */
  maxSandboxes: integer('max_sandboxes').notNull(),
  /** When this node last started as the primary (ms); null for a node that never was. */
  primarySince: integer('primary_since'),
  heardAt: integer('heard_at').notNull(),
})
