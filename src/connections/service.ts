import { and, asc, eq, or } from 'drizzle-orm'
import { randomBytes } from 'node:crypto'
import type { Db } from '../db/client'
import { connections, memberships, projectConnections, sessionConnections } from '../db/schema'
import { ApiError, badRequest, conflict, forbidden, notFound, unprocessable } from '../domain/errors'
import type { KeySealer } from '../accounts/seal'
import { findProject } from '../identity/projects'
import type { OrgAccess, Principal } from '../identity/service'
import type { ResolveHost } from '../egress/address-policy'
import { CONNECTION_NAME, type CreateConnectionBody } from './model'
import { authToken, slugOf } from './inline'
import type { ConnectorSignIn } from './oauth'
import { connectionView } from './view'
import { toolServerUrlProblem } from './url-rule'
import { accountsNamed, ambiguousName } from './names'
import type { ProxyTarget } from './proxy'

export interface ConnectionServiceDeps {
  db: Db
  /** Seals tokens at rest (`accounts.encryption_key`); null: only servers without a token can be stored or sent. */
  sealer: KeySealer | null
  resolve: ResolveHost
  /** AGENTD_WEBHOOK_ALLOW_PRIVATE (tests only): http and inside addresses are allowed too. */
  allowPrivate: boolean
  now: () => number
  /** The access tokens of built-in connectors (signed in with OAuth); null: there are none. */
  signIn?: ConnectorSignIn | null
  /** The provider names of the catalog's built-in connectors: no inline server may take one (rule 3). */
  builtinNames?: string[]
}

/** A create's `connections` entry (spec 4.1): an id or name of the caller's, or an inline server. */
export type ConnectionEntry = string | { url: string; name?: string; auth?: unknown; token?: unknown }

/** A tool server a session runs with, its token sealed for the session. */
export interface RunConnection {
  name: string
  url: string
  sealedToken: string | null
  connectionId: string | null
  /** One of its Project's connectors (lent to every run of the Project), not the caller's own. */
  fromProject?: boolean
}

type Row = typeof connections.$inferSelect

const NAME = new RegExp(CONNECTION_NAME)
const notReady = (what: string) =>
  unprocessable(`connection ${what} is unknown, still connecting or awaiting reconnect`, 'CONNECTION_NOT_READY')
const noSealer = () =>
  new ApiError(
    'unprocessable',
    'This server cannot keep tool server tokens: its operator has not set accounts.encryption_key in the config file',
    'ACCOUNTS_NOT_CONFIGURED',
  )

/**
 * Tool servers (spec 4.1 connections): a user's stored ones (`/o/{org}/connections`), the
 * resolution of a create's entries by its five rules, the copy kept with each session, and the
 * credential the egress proxy puts on the session's requests. Tokens are sealed at rest and never
 * returned; they never enter a sandbox.
 */
export class ConnectionService {
  constructor(private readonly deps: ConnectionServiceDeps) {}

  async create(principal: Principal, access: OrgAccess, body: CreateConnectionBody) {
    if (!principal.userId) throw badRequest('connections belong to a signed-in user')
    if (body.url === undefined || body.name === undefined) throw badRequest('a tool server needs a name and a url (or a connector)')
    const project = body.project === undefined ? null : findProject(this.deps.db, access.orgId, body.project)
    if (body.project !== undefined && !project) throw notFound('Project not found')
    const problem = await this.urlProblem(body.url)
    if (problem) throw unprocessable(problem, 'MCP_SERVER_URL_INVALID')
    const id = `conn_${randomBytes(12).toString('hex')}`
    const token = body.auth?.mode === 'bearer' ? body.auth.token : null
    if (token !== null && !this.deps.sealer) throw noSealer()
    const row = {
      id,
      orgId: access.orgId,
      userId: principal.userId,
      projectId: project?.id ?? null,
      name: body.name,
      url: body.url as string,
      sealedToken: token === null ? null : await this.deps.sealer!.seal(id, token),
      createdAt: this.deps.now(),
    }
    this.deps.db.insert(connections).values(row).run()
    return connectionView({ ...row, status: 'ready' })
  }

  list(principal: Principal, access: OrgAccess) {
    return { data: this.own(principal, access.orgId).map((row) => connectionView(row)) }
  }

  remove(principal: Principal, access: OrgAccess, id: string): void {
    const removed = this.deps.db
      .delete(connections)
      .where(and(eq(connections.id, id), eq(connections.orgId, access.orgId), eq(connections.userId, principal.userId ?? '')))
      .returning({ id: connections.id })
      .all()
    if (removed.length === 0) throw notFound('Connection not found')
  }

  /**
   * A create's entries as the session's tool servers (spec 4.1 rules 1-4): an id is one of the
   * caller's own connections; a name matches the caller's user-level ones and this Project's (two
   * matches 422 CONNECTION_AMBIGUOUS); an unknown or unready one 422 CONNECTION_NOT_READY; an
   * inline server needs a public https URL (422 MCP_SERVER_URL_INVALID), takes `auth` (a `token`
   * beside `url` is 400 FIELD_REMOVED), and its name (a slug of the host by default) is unique.
   */
  async forRun(
    principal: Principal,
    orgId: string,
    projectId: string | null,
    sessionKey: string,
    entries: ConnectionEntry[],
  ): Promise<RunConnection[]> {
    const own = this.own(principal, orgId).filter((row) => row.projectId === null || row.projectId === projectId)
    const resolved: RunConnection[] = []
    for (const [i, entry] of entries.entries()) {
      let run: RunConnection
      if (typeof entry === 'string') {
        // Rule 2: a tool server's name, a built-in connector's provider name, or an account's provider (no tool server).
        const matches = [
          ...own.filter((row) => row.id === entry || row.name === entry),
          ...accountsNamed(this.deps.db, principal, orgId, entry),
        ]
        if (matches.length > 1) throw ambiguousName(i, entry, matches)
        const row = matches[0]
        if (row && 'account' in row)
          throw unprocessable(
            `connections[${i}]: "${entry}" names your ${entry} account, which is no tool server (accounts go in account_id)`,
            'CONNECTION_NOT_READY',
          )
        if (!row || row.status !== 'ready') throw notReady(`connections[${i}] "${entry}"`)
        run = await this.runCopy(row, sessionKey)
      } else {
        if (entry.token !== undefined)
          throw badRequest(`connections[${i}]: "token" beside "url" was removed; send auth: {mode: "bearer", token}`, 'FIELD_REMOVED')
        const problem = await this.urlProblem(entry.url)
        if (problem) throw unprocessable(`connections[${i}]: ${problem}`, 'MCP_SERVER_URL_INVALID')
        const name = entry.name ?? slugOf(entry.url)
        if (!NAME.test(name)) throw badRequest(`connections[${i}]: name must be lower-case letters, digits, - and _ (at most 63)`)
        // Spec 4.1 rule 3: an inline server may not share a name with one of the caller's named servers.
        if (this.deps.builtinNames?.includes(name))
          throw unprocessable(
            `connections[${i}]: "${name}" is a built-in connector's name; give the inline server another`,
            'CONNECTION_AMBIGUOUS',
          )
        const named = own.filter((row) => row.name === name)
        if (named.length > 0)
          throw unprocessable(
            `connections[${i}]: the inline server's name "${name}" is also your connection ${named.map((m) => m.id).join(', ')}; ` +
              'give the inline server another name, or name your connection by id',
            'CONNECTION_AMBIGUOUS',
          )
        const token = authToken(entry.auth, i)
        if (token !== null && !this.deps.sealer) throw noSealer()
        run = { name, url: entry.url, sealedToken: token === null ? null : await this.sealFor(sessionKey, name, token), connectionId: null }
      }
      if (resolved.some((r) => r.name === run.name))
        throw unprocessable(`connections[${i}]: two tool servers of this run are named ${run.name}`, 'CONNECTION_AMBIGUOUS')
      resolved.push(run)
    }
    return resolved
  }

  /**
   * A fork's tool servers: its source's, each token sealed again for the fork (a sealed token opens
   * only for the session it was sealed for). Record them with `attach` as the fork is inserted.
   */
  async forFork(sourceId: string, forkId: string, projectId: string | null): Promise<RunConnection[]> {
    const rows = this.sessionRows(sourceId)
    // A Project connector detached since (or whose owner is no longer an admin) is lent no longer.
    const lent = this.lentIds(projectId)
    const servers: RunConnection[] = []
    for (const row of rows) {
      const token = row.sealedToken === null ? null : await this.openToken(`${sourceId}/${row.name}`, row.sealedToken)
      const sealedToken = token === null ? null : await this.sealFor(forkId, row.name, token)
      const fromProject = row.fromProject && row.connectionId !== null && lent.has(row.connectionId)
      servers.push({ name: row.name, url: row.url, sealedToken, connectionId: row.connectionId, fromProject })
    }
    return servers
  }

  /**
   * A new run's tool servers: its Project's connectors first (every run of the Project gets them,
   * key runs included), then the create's own entries (`forRun`); a name both use is 422
   * CONNECTION_AMBIGUOUS, an attached connector not ready 422 CONNECTION_NOT_READY.
   */
  async forProjectRun(
    principal: Principal,
    orgId: string,
    projectId: string | null,
    sessionKey: string,
    entries: ConnectionEntry[] | undefined,
  ): Promise<RunConnection[]> {
    const lent: RunConnection[] = []
    for (const row of projectId ? this.attachedRows(projectId) : []) {
      if (row.status !== 'ready') throw notReady(`"${row.name}" of the Project`)
      lent.push({ ...(await this.runCopy(row, sessionKey)), fromProject: true })
    }
    // The caller naming a connection the Project has from them already: the Project's copy serves.
    const own = (entries ? await this.forRun(principal, orgId, projectId, sessionKey, entries) : []).filter(
      (server) => server.connectionId === null || !lent.some((l) => l.connectionId === server.connectionId),
    )
    const clash = own.find((server) => lent.some((l) => l.name === server.name))
    if (clash)
      throw unprocessable(
        `connections: "${clash.name}" is also a connector of this run's Project, which every run of it gets; name another server`,
        'CONNECTION_AMBIGUOUS',
      )
    return [...lent, ...own]
  }

  /** A Project's connectors (what every run of it gets), never their tokens. */
  projectConnectors(orgId: string, projectRef: string) {
    const project = this.projectOf(orgId, projectRef)
    return {
      data: this.attachedRows(project.id).map((row) => ({ ...connectionView(row), attached_at: new Date(row.attachedAt).toISOString() })),
    }
  }

  /**
   * Lends one of the admin's own connections (user-level or this Project's, by id or name) to every
   * run of the Project: its token rides on their requests to the server, so only its owner may.
   */
  attachToProject(principal: Principal, access: OrgAccess, projectRef: string, ref: string) {
    if (access.role !== 'admin' || !principal.userId) throw forbidden("Only org admins can change a Project's connectors")
    const project = this.projectOf(access.orgId, projectRef)
    const own = this.own(principal, access.orgId).filter((row) => row.projectId === null || row.projectId === project.id)
    const byName = own.filter((row) => row.name === ref)
    const row = own.find((candidate) => candidate.id === ref) ?? byName[0]
    if (!row) throw notFound(`You have no connection ${ref} (an admin attaches their own connections)`)
    if (row.id !== ref && byName.length > 1)
      throw unprocessable(`"${ref}" names ${byName.length} of your connections; attach one by id`, 'CONNECTION_AMBIGUOUS')
    const named = this.attachedRows(project.id).find((attached) => attached.name === row.name)
    if (named && named.id !== row.id) throw conflict(`The Project has a connector named ${row.name} already (${named.id})`)
    this.deps.db
      .insert(projectConnections)
      .values({ projectId: project.id, connectionId: row.id, name: row.name, attachedAt: this.deps.now() })
      .onConflictDoNothing()
      .run()
    return this.projectConnectors(access.orgId, project.id).data.find((view) => view.id === row.id)!
  }

  /**
   * Takes a connector (by id or name) from the Project: runs started from now on go without it;
   * earlier ones keep their copy, but no longer as the Project's (carriesOwnTokens).
   */
  detachFromProject(access: OrgAccess, projectRef: string, ref: string): void {
    if (access.role !== 'admin') throw forbidden("Only org admins can change a Project's connectors")
    const project = this.projectOf(access.orgId, projectRef)
    const removed = this.deps.db
      .delete(projectConnections)
      .where(
        and(eq(projectConnections.projectId, project.id), or(eq(projectConnections.connectionId, ref), eq(projectConnections.name, ref))),
      )
      .returning({ id: projectConnections.connectionId })
      .all()
    if (removed.length === 0) throw notFound(`Project ${project.name} has no connector ${ref}`)
  }

  /** Records a new session's tool servers; call inside the transaction that inserts the session. */
  attach(sessionId: string, servers: RunConnection[]): void {
    servers.forEach((server, position) =>
      this.deps.db
        .insert(sessionConnections)
        .values({ sessionId, position, ...server })
        .run(),
    )
  }

  /**
   * Whether the session calls tool servers with a user's own credentials: its starter's or inline
   * ones, or a Project connector no longer lent (detached, or its owner no longer an admin). It then
   * takes new work from its starter only (ownAccountOnly).
   */
  carriesOwnTokens(sessionId: string, projectId: string | null): boolean {
    const lent = this.lentIds(projectId)
    return this.sessionRows(sessionId).some((row) => !row.fromProject || row.connectionId === null || !lent.has(row.connectionId))
  }

  /** The names of a session's tool servers, as its CLI's config lists them. */
  names(sessionId: string): string[] {
    return this.deps.db
      .select({ name: sessionConnections.name })
      .from(sessionConnections)
      .where(eq(sessionConnections.sessionId, sessionId))
      .orderBy(asc(sessionConnections.position))
      .all()
      .map((r) => r.name)
  }

  /** Where the egress proxy sends a session's request to its server `name`, and the token it adds. */
  async target(sessionId: string, name: string): Promise<ProxyTarget | null> {
    const row = this.deps.db
      .select()
      .from(sessionConnections)
      .where(and(eq(sessionConnections.sessionId, sessionId), eq(sessionConnections.name, name)))
      .get()
    if (!row) return null
    // A connector's current token (rule 5 keeps the server, not an expiring token); none, as the CLI is told, once it needs a sign-in.
    if (row.connectionId !== null && this.isConnector(row.connectionId)) {
      const token = (await this.deps.signIn?.accessToken(row.connectionId)) ?? null
      return { url: row.url, token, ...(token ? {} : { refusal: `${name} is a connector whose owner must sign in to it again` }) }
    }
    const token = row.sealedToken === null ? null : await this.openToken(`${sessionId}/${name}`, row.sealedToken).catch(() => null)
    return { url: row.url, token }
  }

  /** Why `raw` cannot be a tool server URL, or null (url-rule.ts). */
  urlProblem(raw: string): Promise<string | null> {
    return toolServerUrlProblem(raw, this.deps)
  }

  private own(principal: Principal, orgId: string): Row[] {
    if (!principal.userId) return []
    return this.deps.db
      .select()
      .from(connections)
      .where(and(eq(connections.orgId, orgId), eq(connections.userId, principal.userId)))
      .orderBy(asc(connections.createdAt))
      .all()
  }

  /**
   * A stored connection as a session's copy: its token opened and sealed again for the session. A
   * built-in connector's copy holds no token: the egress proxy asks for its current one each time
   * (refreshed as it expires); one whose token cannot be had now is not ready.
   */
  private async runCopy(row: Pick<Row, 'id' | 'name' | 'url' | 'sealedToken' | 'connector'>, sessionKey: string): Promise<RunConnection> {
    if (row.connector) {
      if (!(await this.deps.signIn?.accessToken(row.id))) throw notReady(`"${row.name}" (it has no working token now)`)
      return { name: row.name, url: row.url, sealedToken: null, connectionId: row.id }
    }
    const token = row.sealedToken === null ? null : await this.openToken(row.id, row.sealedToken)
    return {
      name: row.name,
      url: row.url,
      sealedToken: token === null ? null : await this.sealFor(sessionKey, row.name, token),
      connectionId: row.id,
    }
  }

  private isConnector(id: string): boolean {
    return !!this.deps.db.select({ connector: connections.connector }).from(connections).where(eq(connections.id, id)).get()?.connector
  }

  /** The connections a Project lends now (attached, their owner an admin), by id. */
  private lentIds(projectId: string | null): Set<string> {
    return new Set(projectId ? this.attachedRows(projectId).map((row) => row.id) : [])
  }

  /** A session's copies of its tool servers, in order. */
  private sessionRows(sessionId: string) {
    return this.deps.db
      .select()
      .from(sessionConnections)
      .where(eq(sessionConnections.sessionId, sessionId))
      .orderBy(asc(sessionConnections.position))
      .all()
  }

  /**
   * The connections attached to a Project, in the order they were attached: lent only while their
   * owner is an admin of the org (demoted or gone, their credentials are lent no longer).
   */
  private attachedRows(projectId: string): (Row & { attachedAt: number })[] {
    return this.deps.db
      .select({ connection: connections, attachedAt: projectConnections.attachedAt })
      .from(projectConnections)
      .innerJoin(connections, eq(connections.id, projectConnections.connectionId))
      .innerJoin(
        memberships,
        and(eq(memberships.orgId, connections.orgId), eq(memberships.userId, connections.userId), eq(memberships.role, 'admin')),
      )
      .where(eq(projectConnections.projectId, projectId))
      .orderBy(asc(projectConnections.attachedAt), asc(connections.id))
      .all()
      .map((r) => ({ ...r.connection, attachedAt: r.attachedAt }))
  }

  private projectOf(orgId: string, ref: string) {
    const project = findProject(this.deps.db, orgId, ref)
    if (!project) throw notFound(`The org has no Project ${ref}`)
    return project
  }

  private sealFor(sessionId: string, name: string, token: string): Promise<string> {
    return this.deps.sealer!.seal(`${sessionId}/${name}`, token)
  }

  private async openToken(id: string, sealed: string): Promise<string> {
    if (!this.deps.sealer) throw noSealer()
    return this.deps.sealer.open(id, sealed)
  }
}
