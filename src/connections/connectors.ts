import { randomBytes } from 'node:crypto'
import { and, eq } from 'drizzle-orm'
import type { Db } from '../db/client'
import { connections } from '../db/schema'
import { badRequest, notFound, unprocessable } from '../domain/errors'
import { findProject } from '../identity/projects'
import type { OrgAccess, Principal } from '../identity/service'
import { CONNECTION_NAME, type CreateConnectionBody } from './model'
import { ConnectorSignIn } from './oauth'
import { ConnectionService } from './service'
import { TrackerIssues } from './tracker'
import type { KeySealer } from '../accounts/seal'
import type { ResolveHost } from '../egress/address-policy'
import { publicFetch } from '../egress/public-fetch'
import { connectionView } from './view'

/** A built-in connector of the catalog (`mcp_servers` with `oauth: true`): what a connection to it needs. */
export interface CatalogConnector {
  slug: string
  /** The provider name runs name it by (spec 4.1 rule 2). */
  name: string
  /** Its streamable HTTP endpoint. */
  url: string
}

/** The catalog's connector `slug` that signs in with OAuth over streamable HTTP, or null. */
export function catalogConnector(servers: readonly Record<string, unknown>[], slug: string): CatalogConnector | null {
  const server = servers.find((s) => s.slug === slug && s.oauth === true)
  const remotes = Array.isArray(server?.remotes) ? (server.remotes as { type?: unknown; url?: unknown }[]) : []
  const remote = remotes.find((r) => r.type === 'streamable-http' && typeof r.url === 'string')
  if (!server || !remote) return null
  const name = typeof server.name === 'string' && new RegExp(CONNECTION_NAME).test(server.name) ? server.name : slug
  return { slug, name, url: remote.url as string }
}

export interface ConnectorDeps {
  db: Db
  /** The catalog's tool-server connectors. */
  catalog: readonly Record<string, unknown>[]
  /** Null without `accounts.encryption_key`: a connector's tokens could not be kept. */
  signIn: ConnectorSignIn | null
  /** Why a tool server URL cannot be used, or null (the connections' rule). */
  urlProblem: (url: string) => Promise<string | null>
  now: () => number
}

/**
 * Connections to built-in connectors (issue 37, item 2): made `connecting` with the address their
 * owner signs in at; ready once the callback's code is exchanged (oauth.ts); signed in again after
 * a refresh failed (`reconnect`).
 */
export class ConnectorService {
  constructor(private readonly deps: ConnectorDeps) {}

  async create(principal: Principal, access: OrgAccess, body: CreateConnectionBody & { connector: string }) {
    if (!principal.userId) throw badRequest('connections belong to a signed-in user')
    if (body.url !== undefined || body.auth !== undefined || body.name !== undefined)
      throw badRequest(
        'a connector takes no url, auth or name: its address and provider name are the catalog’s, its tokens come from signing in',
      )
    const { connector: slug, project: projectRef } = body
    const connector = catalogConnector(this.deps.catalog, slug)
    if (!connector) throw unprocessable(`the catalog has no built-in connector "${slug}" that signs in with OAuth`, 'CONNECTOR_UNKNOWN')
    const project = projectRef === undefined ? null : findProject(this.deps.db, access.orgId, projectRef)
    if (projectRef !== undefined && !project) throw notFound('Project not found')
    const problem = await this.deps.urlProblem(connector.url)
    if (problem) throw unprocessable(`connector ${slug}: ${problem}`, 'MCP_SERVER_URL_INVALID')
    const signIn = this.signIn()
    const row = {
      id: `conn_${randomBytes(12).toString('hex')}`,
      orgId: access.orgId,
      userId: principal.userId,
      projectId: project?.id ?? null,
      name: connector.name,
      url: connector.url,
      sealedToken: null,
      status: 'connecting' as const,
      connector: slug,
      createdAt: this.deps.now(),
    }
    this.deps.db.insert(connections).values(row).run()
    try {
      const authorizationUrl = await signIn.begin(row.id)
      return { ...connectionView(row), authorization_url: authorizationUrl }
    } catch (err) {
      // Nothing is kept of a sign-in that could not start.
      this.deps.db.delete(connections).where(eq(connections.id, row.id)).run()
      throw err
    }
  }

  /** A new sign-in for one of the caller's connectors (to leave `reconnect`, or to change account). */
  async signInAgain(principal: Principal, access: OrgAccess, id: string) {
    const row = this.deps.db
      .select()
      .from(connections)
      .where(and(eq(connections.id, id), eq(connections.orgId, access.orgId), eq(connections.userId, principal.userId ?? '')))
      .get()
    if (!row) throw notFound('Connection not found')
    if (!row.connector) throw unprocessable('this connection is not a built-in connector: it has no sign-in', 'CONNECTOR_UNKNOWN')
    return { ...connectionView(row), authorization_url: await this.signIn().begin(row.id) }
  }

  /** The callback of a sign-in (its `state` and `code`), sent by the user who started it. */
  async complete(principal: Principal, access: OrgAccess, state: string, code: string) {
    const row = await this.signIn().complete(state, code, principal.userId, access.orgId)
    return connectionView(row)
  }

  private signIn(): ConnectorSignIn {
    if (!this.deps.signIn)
      throw unprocessable(
        'This server cannot keep connector tokens: its operator has not set accounts.encryption_key in the config file',
        'ACCOUNTS_NOT_CONFIGURED',
      )
    return this.deps.signIn
  }
}

export interface ConnectionSetup {
  db: Db
  /** Seals tokens and OAuth state (`accounts.encryption_key`); null: none can be kept. */
  sealer: KeySealer | null
  resolve: ResolveHost
  /** AGENTD_WEBHOOK_ALLOW_PRIVATE (tests only). */
  allowPrivate: boolean
  /** AGENTD_FETCH_CA_FILE (tests only). */
  ca: string | null
  /** The catalog: its tool-server connectors (`mcp_servers`). */
  catalog: { mcp_servers: readonly Record<string, unknown>[] }
  /** agentd's public address: sign-ins come back to its console there. */
  publicUrl: string
  /** Linear's GraphQL endpoint (tracker issues). */
  linearApiUrl: string
  now: () => number
  log: (line: string) => void
}

/** Where an authorization server sends the browser back: the console's page, which hands code and state to the API. */
export const SIGN_IN_CALLBACK_PATH = '/console/connections/callback'

/** The connections feature: stored tool servers, and built-in connectors signed in with OAuth. */
export function connectionServices(setup: ConnectionSetup): {
  connections: ConnectionService
  connectors: ConnectorService
  trackers: TrackerIssues
} {
  const signIn = setup.sealer
    ? new ConnectorSignIn({
        db: setup.db,
        sealer: setup.sealer,
        fetch: publicFetch(setup),
        redirectUrl: `${setup.publicUrl}${SIGN_IN_CALLBACK_PATH}`,
        now: setup.now,
        log: setup.log,
      })
    : null
  const builtinNames = setup.catalog.mcp_servers.flatMap((server) => {
    const connector = typeof server.slug === 'string' ? catalogConnector(setup.catalog.mcp_servers, server.slug) : null
    return connector ? [connector.name] : []
  })
  const connections = new ConnectionService({ ...setup, signIn, builtinNames })
  const connectors = new ConnectorService({
    db: setup.db,
    catalog: setup.catalog.mcp_servers,
    signIn,
    urlProblem: (url) => connections.urlProblem(url),
    now: setup.now,
  })
  const trackers = new TrackerIssues({ db: setup.db, signIn, apiUrl: setup.linearApiUrl })
  return { connections, connectors, trackers }
}
