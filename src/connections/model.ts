import { Elysia, t, type Static } from 'elysia'
import { literals, nullable } from '../domain/schema-util'
import { CONNECTION_STATUSES } from '../db/schema'

/** A tool server name: what the CLI's config calls it, and what a run names it by. */
export const CONNECTION_NAME = '^[a-z0-9][a-z0-9_-]{0,62}$'

export const ConnectionAuth = t.Union([
  t.Object({ mode: t.Literal('bearer'), token: t.String({ minLength: 1, maxLength: 4096 }) }, { additionalProperties: false }),
  t.Object({ mode: t.Literal('none') }, { additionalProperties: false }),
])

/** A stored connection as the API shows it: never its token. */
export const Connection = t.Object({
  id: t.String({ description: 'Form conn_<id>' }),
  name: t.String(),
  url: t.String(),
  project_id: nullable(t.String({ description: 'null: user-level (every run of the caller may name it)' })),
  connector: nullable(t.String({ description: "A built-in connector's slug (the catalog's mcp_servers): signed in with OAuth" })),
  auth_mode: literals(['bearer', 'none', 'oauth'] as const),
  status: literals(CONNECTION_STATUSES),
  created_at: t.String({ format: 'date-time' }),
})

export const CreateConnectionBody = t.Object(
  {
    name: t.Optional(
      t.String({
        pattern: CONNECTION_NAME,
        description: "Lower-case letters, digits, - and _; at most 63. Required with url; a connector is named by its provider's name",
      }),
    ),
    url: t.Optional(
      t.String({
        minLength: 1,
        maxLength: 2048,
        description: 'A streamable HTTP MCP endpoint on https whose host resolves to public addresses only (or connector)',
      }),
    ),
    connector: t.Optional(
      t.String({
        minLength: 1,
        maxLength: 200,
        description: "A built-in connector's slug (discovery's mcp_servers with oauth: true), instead of url: signed in with OAuth",
      }),
    ),
    auth: t.Optional(ConnectionAuth),
    project: t.Optional(t.String({ description: 'A Project handle or id: the connection is for runs of that Project only' })),
  },
  { additionalProperties: false },
)

export const ConnectionParams = t.Object({ org: t.String(), connection: t.String() })

/** A connection whose owner must sign in: the address to send them to (the authorization server's). */
export const ConnectionSignIn = t.Object({
  ...Connection.properties,
  authorization_url: t.String({
    description: "Where the owner signs in; the authorization server then sends the browser to agentd's callback",
  }),
})

export const SignInCallbackBody = t.Object(
  {
    state: t.String({ minLength: 1, maxLength: 512, description: 'The `state` the authorization server sent back' }),
    code: t.String({ minLength: 1, maxLength: 4096, description: 'The `code` it sent back' }),
  },
  { additionalProperties: false },
)

/** A Project's connector: a connection its owner (an org admin) lent to every run of the Project. */
export const ProjectConnector = t.Object({
  ...Connection.properties,
  attached_at: t.String({ format: 'date-time' }),
})

export const ProjectParams = t.Object({ org: t.String(), project: t.String({ description: 'A Project handle or id' }) })
export const ProjectConnectorParams = t.Object({
  org: t.String(),
  project: t.String({ description: 'A Project handle or id' }),
  connection: t.String({ description: 'One of your connections (attach), or one of the Project’s connectors (detach): by id or name' }),
})

export type CreateConnectionBody = Static<typeof CreateConnectionBody>

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const connectionModels = new Elysia({ name: 'agentd/models/connections' }).model({ Connection, ConnectionSignIn, ProjectConnector })
