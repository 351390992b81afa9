import { index, integer, primaryKey, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import { createdAt, ownedBy } from './columns'
import { projects } from './identity'

/**
 * A Project's secrets (contract section 10): each reaches the Project's sandboxes as an environment
 * variable of its name. The value is kept only sealed (JWE under the server's encryption key,
 * bound to the Project and the name, so a sealed value copied onto another row does not open).
 */
export const projectSecrets = sqliteTable(
  'project_secrets',
  {
    projectId: ownedBy('project_id', () => projects.id),
    name: text('name').notNull(),
    sealed: text('sealed').notNull(),
    updatedAt: integer('updated_at').notNull(),
  },
  (table) => [primaryKey({ columns: [table.projectId, table.name] })],
)

/**
 * A Project's environment (contract section 10): its setup script, the script's time limit and the
 * hosts its sandboxes may reach. No row: the defaults, revision 0. Every PUT replaces the row whole
 * and adds 1 to `revision`, which keys the Project's prebuilt images.
 */
export const projectEnvironments = sqliteTable('project_environments', {
  projectId: text('project_id')
    .primaryKey()
    .references(() => projects.id, { onDelete: 'cascade' }),
  setup: text('setup'),
  setupTimeoutS: integer('setup_timeout_s').notNull(),
  /** The `network.allow` entries as the admin wrote them (src/egress/allowlist.ts parses them). */
  allow: text('allow', { mode: 'json' }).$type<string[]>().notNull(),
  revision: integer('revision').notNull(),
  updatedAt: integer('updated_at').notNull(),
})

/**
 * A sandbox disk kept after a setup that exited 0: a later session of the Project with the same key
 * (environment revision, commit checked out, digest of the secrets) starts from a copy of it.
 * `commit` is '' when the session has no repository.
 */
export const projectPrebuilds = sqliteTable(
  'project_prebuilds',
  {
    id: text('id').primaryKey(),
    projectId: ownedBy('project_id', () => projects.id),
    revision: integer('revision').notNull(),
    commit: text('commit').notNull(),
    secretsDigest: text('secrets_digest').notNull(),
    createdAt: createdAt(),
  },
  (table) => [index('project_prebuilds_key_idx').on(table.projectId, table.revision, table.commit, table.secretsDigest)],
)
