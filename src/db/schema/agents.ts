import { index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import type { Effort, Harness, Speed } from '../../domain/harness'
import { createdAt, ownedBy } from './columns'
import { orgs, users } from './identity'

/** What a saved agent runs with; one JSON object per revision, digested as a whole. */
export interface AgentConfig {
  harness: Harness
  model: string | null
  effort: Effort | null
  speed: Speed | null
  instructions: string | null
  skills: string[]
  connections: string[]
}

/**
 * A saved agent (spec 4.1 `agent_id`): a reviewed setup an org's members start runs from. Its
 * configuration lives in revisions; `revision` is the current one.
 */
export const savedAgents = sqliteTable(
  'saved_agents',
  {
    id: text('id').primaryKey(),
    orgId: ownedBy('org_id', () => orgs.id),
    name: text('name').notNull(),
    revision: integer('revision').notNull(),
    createdByUserId: text('created_by_user_id').references(() => users.id, { onDelete: 'set null' }),
    createdAt: createdAt(),
    updatedAt: integer('updated_at').notNull(),
  },
  (table) => [index('saved_agents_org_idx').on(table.orgId)],
)

/**
 * Every change to a saved agent, kept: a run names the revision it ran (`profile_revision`) and
 * its digest. `catalog_revision` is the catalog the revision was reviewed against; a run of a
 * revision whose catalog has changed since is 409 CATALOG_REFRESH_REQUIRED until it is reviewed again.
 */
export const savedAgentRevisions = sqliteTable(
  'saved_agent_revisions',
  {
    agentId: ownedBy('agent_id', () => savedAgents.id),
    revision: integer('revision').notNull(),
    config: text('config', { mode: 'json' }).$type<AgentConfig>().notNull(),
    digest: text('digest').notNull(),
    catalogRevision: text('catalog_revision').notNull(),
    createdByUserId: text('created_by_user_id').references(() => users.id, { onDelete: 'set null' }),
    createdAt: createdAt(),
  },
  (table) => [primaryKey({ columns: [table.agentId, table.revision] })],
)
