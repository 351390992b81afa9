import { sql } from 'drizzle-orm'
import { check, index, integer, primaryKey, real, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core'
import { createdAt, ownedBy } from './columns'

export const orgs = sqliteTable('orgs', {
  id: text('id').primaryKey(),
  slug: text('slug').notNull().unique(),
  createdAt: createdAt(),
})

export const users = sqliteTable('users', {
  id: text('id').primaryKey(),
  email: text('email').notNull().unique(),
  name: text('name'),
  avatarUrl: text('avatar_url'),
  createdAt: createdAt(),
})

export const ROLES = ['admin', 'member'] as const
export type Role = (typeof ROLES)[number]

export const memberships = sqliteTable(
  'memberships',
  {
    orgId: ownedBy('org_id', () => orgs.id),
    userId: ownedBy('user_id', () => users.id),
    role: text('role', { enum: ROLES }).notNull(),
    createdAt: createdAt(),
  },
  (table) => [
    primaryKey({ columns: [table.orgId, table.userId] }),
    check('memberships_role_check', sql`${table.role} in ('admin', 'member')`),
  ],
)

/** Signed-in tokens: only the SHA-256 of the token is kept. */
export const userTokens = sqliteTable(
  'user_tokens',
  {
    tokenHash: text('token_hash').primaryKey(),
    userId: ownedBy('user_id', () => users.id),
    createdAt: createdAt(),
    expiresAt: integer('expires_at'),
    revokedAt: integer('revoked_at'),
  },
  (table) => [index('user_tokens_user_idx').on(table.userId)],
)

export const projects = sqliteTable(
  'projects',
  {
    id: text('id').primaryKey(),
    orgId: ownedBy('org_id', () => orgs.id),
    name: text('name').notNull(),
    repoOwner: text('repo_owner'),
    repoName: text('repo_name'),
    /**
     * The org's GitHub installation (github_installations.id) its runs reach the repository through;
     * null: the one GitHub says covers it.
     */
    githubInstallation: text('github_installation'),
    createdAt: createdAt(),
  },
  (table) => [uniqueIndex('projects_org_name_idx').on(table.orgId, table.name)],
)

/**
 * Per-org plan (contract sections 2 and 9, `plan set`); null columns mean "no limit"; an org without a
 * row is on the config's default plan.
 */
export const plans = sqliteTable('plans', {
  orgId: text('org_id')
    .primaryKey()
    .references(() => orgs.id, { onDelete: 'cascade' }),
  tokenLimit: integer('token_limit'),
  computeMinutes: integer('compute_minutes'),
  weeklyComputeMinutes: integer('weekly_compute_minutes'),
  spendCapUsd: real('spend_cap_usd'),
  maxConcurrent: integer('max_concurrent'),
  paymentMethod: text('payment_method', { enum: ['none', 'card'] })
    .notNull()
    .default('none'),
  /** `plan clear`: the org has no plan, and may not run until `plan set` (the other columns are ignored). */
  cleared: integer('cleared', { mode: 'boolean' }).notNull().default(false),
  updatedAt: integer('updated_at').notNull(),
})
