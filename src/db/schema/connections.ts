import { index, integer, primaryKey, sqliteTable, text, uniqueIndex } from 'drizzle-orm/sqlite-core'
import { createdAt, ownedBy } from './columns'
import { orgs, projects, users } from './identity'
import { sessions } from './sessions'

export const CONNECTION_STATUSES = ['ready', 'connecting', 'reconnect'] as const

/**
 * A user's stored tool server (spec 4.1 connections, our `/o/{org}/connections`): user-level, or
 * for one Project. Its bearer token is sealed (JWE under `accounts.encryption_key`) and never
 * returned; `status` other than `ready` makes a run naming it 422 CONNECTION_NOT_READY.
 */
export const connections = sqliteTable(
  'connections',
  {
    id: text('id').primaryKey(),
    orgId: ownedBy('org_id', () => orgs.id),
    userId: ownedBy('user_id', () => users.id),
    projectId: text('project_id').references(() => projects.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    url: text('url').notNull(),
    sealedToken: text('sealed_token'),
    status: text('status', { enum: CONNECTION_STATUSES }).notNull().default('ready'),
    createdAt: createdAt(),
    /** A built-in connector's slug (the catalog's `mcp_servers`): signed in with OAuth, not given a token. */
    connector: text('connector'),
    /**
     * A connector's OAuth state, sealed as one JSON value: its registered client, its tokens, the
     * authorization server found, and the PKCE verifier of a sign-in under way.
     */
    sealedOauth: text('sealed_oauth'),
    /** The `state` of the sign-in under way: its callback finds the connection by it, once. */
    oauthState: text('oauth_state'),
    /** When the access token expires (ms): it is refreshed before. */
    tokenExpiresAt: integer('token_expires_at'),
  },
  (table) => [index('connections_owner_idx').on(table.orgId, table.userId), uniqueIndex('connections_oauth_state').on(table.oauthState)],
)

/**
 * The tool servers a session runs with, by the name its CLI's config gives each: copied at create
 * from the caller's connections or the inline entries, so follow-ups keep them (spec 4.1 rule 5).
 * The token is sealed again for the session; only the egress proxy opens it.
 */
export const sessionConnections = sqliteTable(
  'session_connections',
  {
    sessionId: ownedBy('session_id', () => sessions.id),
    position: integer('position').notNull(),
    name: text('name').notNull(),
    url: text('url').notNull(),
    sealedToken: text('sealed_token'),
    connectionId: text('connection_id'),
    /**
     * A connector of the session's Project (project_connections), which its owner lent to every run
     * of the Project: it does not make the session its owner's alone (ownAccountOnly).
     */
    fromProject: integer('from_project', { mode: 'boolean' }).notNull().default(false),
  },
  (table) => [primaryKey({ columns: [table.sessionId, table.position] })],
)

/**
 * A Project's connectors (issue 37): an org admin attaches one of their own connections, and every
 * run of the Project, key runs included, gets it without naming it, its token kept on the server
 * side as any connection's. Its name is unique among the Project's connectors.
 */
export const projectConnections = sqliteTable(
  'project_connections',
  {
    projectId: text('project_id')
      .notNull()
      .references(() => projects.id, { onDelete: 'cascade' }),
    connectionId: text('connection_id')
      .notNull()
      .references(() => connections.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    attachedAt: integer('attached_at').notNull(),
  },
  (table) => [
    primaryKey({ columns: [table.projectId, table.connectionId] }),
    uniqueIndex('project_connections_name').on(table.projectId, table.name),
  ],
)
