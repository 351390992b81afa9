import { initialTransition } from 'xstate'
import { SESSION_MACHINE_VERSION, sessionMachine, statusOf } from '../../machines/session.machine'
import { ownAccountOnly } from '../accounts/owner'
import type { AccountService } from '../accounts/service'
import type { Catalog, HarnessVersions } from '../catalog/catalog'
import type { ConnectionService } from '../connections/service'
import type { TrackerIssues } from '../connections/tracker'
import type { Db } from '../db/client'
import { ApiError, notFound } from '../domain/errors'
import { newId } from '../domain/ids'
import type { FileService } from '../files/service'
import { findProject, NO_PROJECT } from '../identity/projects'
import type { OrgAccess, Principal } from '../identity/service'
import type { PlanService } from '../plans/service'
import { checkRunRepository, type RepositoryAccess } from '../repositories/run-access'
import type { HarnessInstaller } from '../runtime/harness-install'
import type { SessionRuntime } from '../runtime/session-runtime'
import type { SessionStore } from '../session-record/store'
import { SkillService } from '../skills/service'
import { type SessionActor, statusEvent } from './actor'
import { assertKeySlot, assertPromptSize, runSpecOf, type RunSpec } from './create-rules'
import { IdempotencyKeys, scopeOf } from './idempotency'
import { bodyDigest } from '../domain/digest'
import { type InputDeps, readCreate } from './input'
import type { CreateSessionBody } from './model'
import { newSessionRow } from './new-session'
import { forkRow, forkSnapshot } from './fork'
import { NotCopyable } from '../../sandbox/driver'
import { profileFields, withProfile } from './profile'
import type { SavedAgentProfiles } from './ports'
import type { SessionQueries } from './queries'
import { checkResources, runRepository } from './resources'

export interface SessionServiceDeps {
  db: Db
  catalog: Catalog
  versions: HarnessVersions
  store: SessionStore
  queries: SessionQueries
  /** The machine loop every command goes through. */
  actor: SessionActor
  /** Confirms a stop_turn: the turn's CLI has exited. */
  runtime: Pick<SessionRuntime, 'stopped' | 'newSessionId' | 'unusedSessionId' | 'forked' | 'discard'>
  installer: HarnessInstaller
  plans: PlanService
  accounts: AccountService
  files: FileService
  agents: SavedAgentProfiles
  skills: SkillService
  connections: ConnectionService
  /** Reads the tracker issues a run's `resources` name, for its first turn's prompt. */
  trackers: Pick<TrackerIssues, 'read'>
  /** Shape B image blocks' URLs, fetched under the webhook rules (egress/public-get.ts) in the create's fetch budget. */
  fetches: InputDeps['fetches']
  /** A run's repository is checked with the code host at create; absent without a GitHub App. */
  repositories?: RepositoryAccess
  /** How long an Idempotency-Key names its session. */
  idempotencyMs: number
  now: () => number
  log: (line: string) => void
}

/** What a PATCH of a session's status did: cancelled, accepted to happen (pause, resume), or the turn confirmed stopped. */
export type UpdateResult = { kind: 'cancelled' } | { kind: 'accepted'; operationId: string } | { kind: 'turn_stopped' }

/** Where a follow-up went: a turn started with it now (the session rested), or into the queue at `position`. */
export type MessageResult = { kind: 'delivered' } | { kind: 'queued'; messageId: string; position: number }

/** How long stop_turn waits for the harness to exit before answering 422. */
const STOP_TURN_TIMEOUT_MS = 10_000

/**
 * Sessions' commands from callers: create (every admission rule, then one insert), PATCH and
 * follow-ups, each handed to the session's actor (actor.ts) as an event; the reads are
 * SessionQueries'.
 */
export class SessionService {
  private readonly store: SessionStore
  private readonly actor: SessionActor
  private readonly now: () => number
  private readonly idempotency: IdempotencyKeys

  constructor(private readonly deps: SessionServiceDeps) {
    this.store = deps.store
    this.actor = deps.actor
    this.now = deps.now
    this.idempotency = new IdempotencyKeys(deps.db, deps.idempotencyMs, deps.now)
  }

  /** Expires sessions parked past the idle limit, and Idempotency-Keys past theirs; the server calls it periodically. */
  expireIdle(): number {
    this.idempotency.sweep()
    return this.actor.expireIdle()
  }

  /** `idempotencyKey`: the request's Idempotency-Key, as the route's schema checked it (see idempotency.ts). */
  async create(principal: Principal, access: OrgAccess, projectRef: string, body: CreateSessionBody, idempotencyKey: string | null = null) {
    const projectless = projectRef === NO_PROJECT
    const project = projectless ? null : findProject(this.deps.db, access.orgId, projectRef)
    if (!projectless && !project) throw notFound('Project not found')
    // The Project the path names is part of the request: the same key and body under another is a conflict.
    const keyed =
      idempotencyKey === null
        ? null
        : { scope: scopeOf(principal, access.orgId), key: idempotencyKey, digest: bodyDigest({ project: projectRef, body }) }
    // A replay answers with the session as it is now, before any admission rule: it makes nothing.
    const replay = () => keyed && this.idempotency.replay(keyed.scope, keyed.key, keyed.digest, (id) => this.store.get(id)?.status ?? null)
    const earlier = replay()
    if (earlier) return this.deps.queries.view(this.store.get(earlier)!)
    // Shape B's files are fetched and decoded here, before anything is stored.
    const { body: request, attachments, fetches } = await readCreate(principal, access.orgId, body, this.deps)
    const resources = request.resources ? checkResources(request.resources, project, this.deps.repositories !== undefined) : null
    const named = resources?.repository ?? null
    const profile = request.agent_id === undefined ? null : this.deps.agents.forRun(access.orgId, request.agent_id)
    const run = profile ? withProfile(request, profile) : request
    const runSpec = runSpecOf(run, this.deps.catalog, this.deps.versions, projectless)
    // No skill or tool server is fetched for a caller whose plan refuses the run anyway (checked again before the insert).
    this.deps.plans.assertAllows(access.orgId, runSpec.model, (run.account_id ?? null) !== null)
    // Fetched now (in what the images left of the budget), each code-host source pinned to its commit: the run never reads the URLs again.
    const skills = run.skills ? await this.deps.skills.fetch(run.skills, fetches) : []
    // Tracker issues the run names, read now through the caller's connection (422 when they cannot be).
    const issues = resources?.issues ?? []
    const resourceText = issues.length > 0 ? await this.deps.trackers.read(principal, access.orgId, project?.id ?? null, issues) : null
    // Tokens are sealed for this session, under its id: made now, before anything is awaited again.
    // A warm sandbox waits under the id the runtime gives (a new one when none does).
    const id = this.deps.runtime.newSessionId(runSpec.harness)
    // A create that stores no session gives its id back: the warm sandbox it took is not left running.
    let stored = false
    try {
      // The Project's connectors, then the caller's own (a key run names none, but gets its Project's).
      const servers = await this.deps.connections.forProjectRun(principal, access.orgId, project?.id ?? null, id, run.connections)
      if (runSpec.pinned) await this.resolvePin(runSpec)
      const installation = await checkRunRepository(
        this.deps.repositories,
        access.orgId,
        runRepository(project, named, runSpec),
        { project, named: named !== null && !project?.repoOwner, connection: named?.connection ?? null },
        runSpec.onPr,
      )
      // Another create with the key may have made its session while this one waited.
      const made = replay()
      if (made) return this.deps.queries.view(this.store.get(made)!)
      // Synchronous from here to the insert, so two creates cannot both take a key's last slot, nor
      // both make a session for one Idempotency-Key.
      const accountId = request.account_id ?? null
      if (accountId !== null) this.deps.accounts.assertUsable(principal, access.orgId, accountId, runSpec.model)
      this.deps.plans.assertAllows(access.orgId, runSpec.model, accountId !== null)
      if (principal.apiKey) assertKeySlot(this.deps.db, principal.apiKey)

      const [snapshot] = initialTransition(sessionMachine, {
        persistence: runSpec.persistence,
        mode: runSpec.mode,
        hasSchema: runSpec.outputSchema !== null,
      })
      const row = newSessionRow({
        id,
        orgId: access.orgId,
        project,
        principal,
        accountId,
        runSpec,
        repository: runRepository(project, named, runSpec),
        installation,
        status: statusOf(snapshot),
        now: this.now(),
      })
      if (profile) Object.assign(row, profileFields(request, profile, runSpec))
      if (skills.length > 0) row.effectiveConfig = { ...row.effectiveConfig, skills: SkillService.pins(skills) }
      if (resourceText !== null) row.resourceText = resourceText
      this.store.insert(
        row,
        sessionMachine.getPersistedSnapshot(snapshot),
        SESSION_MACHINE_VERSION,
        [statusEvent(0, statusOf(snapshot), id)],
        () => {
          if (keyed) this.idempotency.claim(keyed.scope, keyed.key, keyed.digest, id)
          this.deps.files.attach(principal, access.orgId, id, attachments)
          this.deps.skills.attach(id, skills)
          this.deps.connections.attach(id, servers)
        },
      )
      stored = true
    } finally {
      if (!stored) this.deps.runtime.unusedSessionId(id)
    }
    this.actor.admit()
    return this.deps.queries.view(this.store.get(id)!)
  }

  /** PATCH `{status}` (spec 4.1): every rule is the machine's; this only maps the answers. */
  async update(
    access: OrgAccess,
    principal: Principal,
    projectRef: string,
    id: string,
    status: 'cancelled' | 'paused' | 'running' | 'stop_turn',
  ): Promise<UpdateResult> {
    const row = this.deps.queries.find(access, projectRef, id)
    switch (status) {
      case 'cancelled':
        this.actor.command(row.id, { type: 'cancel' })
        return { kind: 'cancelled' }
      case 'paused':
        this.actor.command(row.id, { type: 'pause' })
        return { kind: 'accepted', operationId: newId() }
      case 'running':
        ownAccountOnly(principal, row, this.deps.connections.carriesOwnTokens(row.id, row.projectId))
        this.actor.command(row.id, { type: 'resume', ...this.actor.slots(row.orgId) })
        return { kind: 'accepted', operationId: newId() }
      case 'stop_turn':
        this.actor.command(row.id, { type: 'stop_turn' })
        try {
          await this.deps.runtime.stopped(row.id, STOP_TURN_TIMEOUT_MS)
        } catch {
          throw new ApiError('unprocessable', 'The runtime could not confirm that the turn stopped', 'STOP_TURN_UNCONFIRMED')
        }
        return { kind: 'turn_stopped' }
    }
  }

  /** POST a follow-up (spec 4.3): delivered to the turn now, or queued behind the running turn. */
  message(access: OrgAccess, principal: Principal, projectRef: string, id: string, content: string): MessageResult {
    assertPromptSize('content', content)
    const row = this.deps.queries.find(access, projectRef, id)
    ownAccountOnly(principal, row, this.deps.connections.carriesOwnTokens(row.id, row.projectId))
    this.deps.plans.assertAllows(row.orgId, row.model, row.accountId !== null)
    const message = { id: newId(), content }
    const { next, actions } = this.actor.command(row.id, { type: 'message', ...this.actor.slots(row.orgId) }, message)
    if (actions.some((a) => a.type === 'deliverMessage')) return { kind: 'delivered' }
    return { kind: 'queued', messageId: message.id, position: next.context.queued }
  }

  /**
   * POST …/fork (contract section 13): a new session of the same Project whose sandbox is a copy
   * of this one's as parked after its last turn. The machine decides whether the source can be
   * forked (409 NOT_FORKABLE); the copy is made before the answer, so a fork that exists has its
   * sandbox, and one that could not be copied was never stored. An `Idempotency-Key` answers a
   * retry with the fork first made, as a create's does.
   */
  async fork(access: OrgAccess, principal: Principal, projectRef: string, id: string, idempotencyKey: string | null = null) {
    const source = this.deps.queries.find(access, projectRef, id)
    const keyed =
      idempotencyKey === null
        ? null
        : { scope: scopeOf(principal, access.orgId), key: idempotencyKey, digest: bodyDigest({ fork: source.id }) }
    const replay = () =>
      keyed && this.idempotency.replay(keyed.scope, keyed.key, keyed.digest, (sid) => this.store.get(sid)?.status ?? null)
    const earlier = replay()
    if (earlier) return this.deps.queries.view(this.store.get(earlier)!)
    ownAccountOnly(principal, source, this.deps.connections.carriesOwnTokens(source.id, source.projectId))
    this.deps.plans.assertAllows(source.orgId, source.model, source.accountId !== null)
    const into = newId()
    const servers = await this.deps.connections.forFork(source.id, into, source.projectId).catch((err: Error) => {
      throw new ApiError('unavailable', `The tool server tokens of this session could not be sealed for its fork: ${err.message}`)
    })
    this.actor.command(source.id, { type: 'fork', into })
    let copied: { conversation: boolean }
    try {
      copied = await this.deps.runtime.forked(into)
    } catch (err) {
      const why = (err as Error).message
      if (err instanceof NotCopyable) throw new ApiError('conflict', `This session cannot be forked: ${why}`, 'NOT_FORKABLE')
      throw new ApiError('unavailable', `The session's sandbox could not be copied: ${why}`, 'SANDBOX_COPY_FAILED')
    }
    // Another request with the key made its fork while this one copied: that one is the answer.
    const made = replay()
    if (made) {
      this.deps.runtime.discard(into)
      return this.deps.queries.view(this.store.get(made)!)
    }
    try {
      const row = forkRow(source, into, principal, this.now())
      // Without the conversation (the process driver) the fork's CLI starts a new one in the copied files.
      row.forkedConversation = copied.conversation && source.harnessSessionId !== null
      if (!row.forkedConversation) row.harnessSessionId = null
      this.store.insert(row, forkSnapshot(source), SESSION_MACHINE_VERSION, [statusEvent(0, 'completed', into)], () => {
        this.deps.connections.attach(into, servers)
        if (keyed) this.idempotency.claim(keyed.scope, keyed.key, keyed.digest, into)
      })
    } catch (err) {
      this.deps.runtime.discard(into)
      throw err
    }
    return this.deps.queries.view(this.store.get(into)!)
  }

  /**
   * A pin on another CLI version: npm must know it (422 otherwise). Its install starts now, in the
   * background, so it is usually ready when the sandbox is; the turn waits for it either way.
   */
  private async resolvePin(runSpec: RunSpec): Promise<void> {
    const pkg = this.deps.catalog.harnesses.find((h) => h.id === runSpec.harness)!.package
    runSpec.versionResolved = await this.deps.installer.resolve(runSpec.agent, pkg, runSpec.versionResolved)
    this.deps.installer.modulesFor(pkg, runSpec.versionResolved).catch((err) => this.deps.log(`agentd: ${(err as Error).message}`))
  }
}
