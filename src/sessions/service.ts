import { initialTransition, transition } from 'xstate'
import { refusalOf, SESSION_MACHINE_VERSION, sessionMachine, statusOf, type SessionMachineEvent } from '../../machines/session.machine'
import type { HostCapacity } from '../config'
import type { Db } from '../db/client'
import { ApiError, notFound } from '../domain/errors'
import { newId } from '../domain/ids'
import { STATUS_GROUPS, type SessionStatus } from '../domain/status'
import type { SandboxDriver } from '../../sandbox/driver'
import type { Catalog } from '../catalog/catalog'
import type { HarnessInstaller } from '../runtime/harness-install'
import type { OrgAccess, Principal } from '../identity/service'
import type { AdmissionQueue } from './admission'
import { billLateTurn, meterTransition, recordUsage } from '../plans/meter'
import type { PlanService } from '../plans/service'
import { ownAccountOnly } from '../accounts/owner'
import type { AccountService } from '../accounts/service'
import type { Metrics } from '../metrics/metrics'
import { bodyDigest, IdempotencyKeys, scopeOf } from './idempotency'
import { findProject, NO_PROJECT } from '../identity/projects'
import { assertKeySlot, assertPromptSize, planSession, type HarnessVersions, type SessionPlan } from './create-rules'
import { readCreate, type InputDeps } from './input'
import { newSessionRow } from './new-session'
import { profileFields, withProfile } from './profile'
import { checkResources, runRepository } from './resources'
import { checkRunRepository, type RepositoryAccess } from '../repositories/run-access'
import type { AgentService } from '../agents/service'
import { SkillService } from '../skills/service'
import type { ConnectionService } from '../connections/service'
import type { FileService } from '../files/service'
import type { SessionRuntime } from '../runtime/runtime'
import type { CreateSessionBody } from './model'
import type { SessionQueries } from './queries'
import { turnEndOf } from './turn-end-of'
import { VersionConflict, type NewEvent, type SessionPatch, type SessionRow, type SessionStore } from './store'

export interface SessionServiceDeps {
  db: Db
  catalog: Catalog
  versions: HarnessVersions
  driver: SandboxDriver
  store: SessionStore
  queries: SessionQueries
  runtime: SessionRuntime
  installer: HarnessInstaller
  plans: PlanService
  accounts: AccountService
  files: FileService
  agents: AgentService
  skills: SkillService
  connections: ConnectionService
  /** Shape B image blocks' URLs, fetched under the webhook rules (files/public-get.ts) in the create's fetch budget. */
  fetches: InputDeps['fetches']
  /** A run's repository is checked with the code host at create; absent without a GitHub App. */
  repositories?: RepositoryAccess
  metrics?: Metrics
  /** Runs at once per org when its plan sets none. */
  defaultMaxConcurrent: number
  /** What the host runs at once, whatever the plans allow. */
  capacity: Pick<HostCapacity, 'maxSandboxes' | 'maxStarting'>
  /** The fair order queued sessions start in (shared with the read side's places). */
  queue: AdmissionQueue
  /** How long a parked session waits before `idle.timeout`. */
  idleMs: number
  /** How long an Idempotency-Key names its session. */
  idempotencyMs: number
  now: () => number
  log: (line: string) => void
  /**
   * Called inside the transaction that ends a turn (or a run that never got to one), so a
   * webhook outbox row commits or rolls back with the transition.
   */
  onStatusChange?: (change: StatusChange) => void
}

/** What a PATCH of a session's status did: cancelled, accepted to happen (pause, resume), or the turn confirmed stopped. */
export type UpdateResult = { kind: 'cancelled' } | { kind: 'accepted'; operationId: string } | { kind: 'turn_stopped' }

/** Where a follow-up went: into the running turn, or into the queue at `position`. */
export type MessageResult = { kind: 'delivered' } | { kind: 'queued'; messageId: string; position: number }

export interface StatusChange {
  row: SessionRow
  from: SessionStatus
  to: SessionStatus
  patch: SessionPatch
}

/** How often a transition is decided again when another writer got in first. */
const CONFLICT_ATTEMPTS = 3

/** How long stop_turn waits for the harness to exit before answering 422. */
const STOP_TURN_TIMEOUT_MS = 10_000

const { active: ACTIVE, parkable: PARKABLE, inProgress: IN_PROGRESS } = STATUS_GROUPS

/**
 * Statuses whose sandbox the host holds: starting, running a turn, or paused (a turn paused on
 * bwrap, or on gVisor when it could not be checkpointed, stays frozen in memory).
 */
const HOST_HELD: readonly SessionStatus[] = [...ACTIVE, 'paused']

/**
 * Sessions' commands (create, PATCH, follow-ups, idle expiry, rehydrate) and the machine loop; the
 * reads are SessionQueries'. Each event goes through the pure transition; the snapshot, status
 * column and event rows are committed in one transaction, and only then are the machine's actions
 * carried out (by SessionRuntime).
 */
export class SessionService {
  private readonly store: SessionStore
  private readonly runtime: SessionRuntime
  private readonly now: () => number
  private readonly idempotency: IdempotencyKeys

  constructor(private readonly deps: SessionServiceDeps) {
    this.store = deps.store
    this.runtime = deps.runtime
    this.now = deps.now
    this.idempotency = new IdempotencyKeys(deps.db, deps.idempotencyMs, deps.now)
  }

  /** `idempotencyKey`: the request's Idempotency-Key, as the route's schema checked it (see idempotency.ts). */
  async create(principal: Principal, access: OrgAccess, projectRef: string, body: CreateSessionBody, idempotencyKey: string | null = null) {
    const projectless = projectRef === NO_PROJECT
    const project = projectless ? null : findProject(this.deps.db, access.orgId, projectRef)
    if (!projectless && !project) throw notFound('Project not found')
    // The Project the path names is part of the request: the same key and body under another is a conflict.
    const keyed = idempotencyKey === null ? null : { scope: scopeOf(principal, access.orgId), key: idempotencyKey, digest: bodyDigest({ project: projectRef, body }) }
    // A replay answers with the session as it is now, before any admission rule: it makes nothing.
    const replay = () => keyed && this.idempotency.replay(keyed.scope, keyed.key, keyed.digest, (id) => this.store.get(id)?.status ?? null)
    const earlier = replay()
    if (earlier) return this.deps.queries.view(this.store.get(earlier)!)
    // Shape B's files are fetched and decoded here, before anything is stored.
    const { body: request, attachments, fetches } = await readCreate(principal, access.orgId, body, this.deps)
    const named = request.resources ? checkResources(request.resources, project, this.deps.repositories !== undefined) : null
    const profile = request.agent_id === undefined ? null : this.deps.agents.forRun(access.orgId, request.agent_id)
    const run = profile ? withProfile(request, profile) : request
    const plan = planSession(run, this.deps.catalog, this.deps.versions, projectless)
    // Nothing is fetched for a caller whose plan refuses the run anyway (checked again before the insert).
    this.deps.plans.assertAllows(access.orgId, plan.model, (run.account_id ?? null) !== null)
    // Fetched now (in what the images left of the budget), each code-host source pinned to its commit: the run never reads the URLs again.
    const skills = run.skills ? await this.deps.skills.fetch(run.skills, fetches) : []
    // Tokens are sealed for this session, under its id: made now, before anything is awaited again.
    const id = newId()
    const servers = run.connections ? await this.deps.connections.forRun(principal, access.orgId, project?.id ?? null, id, run.connections) : []
    if (plan.pinned) await this.resolvePin(plan)
    const installation = await checkRunRepository(this.deps.repositories, access.orgId, runRepository(project, named, plan), { project, named: named !== null && !project?.repoOwner, connection: named?.connection ?? null }, plan.onPr)
    // Another create with the key may have made its session while this one waited.
    const made = replay()
    if (made) return this.deps.queries.view(this.store.get(made)!)
    // Synchronous from here to the insert, so two creates cannot both take a key's last slot, nor
    // both make a session for one Idempotency-Key.
    const accountId = request.account_id ?? null
    if (accountId !== null) this.deps.accounts.assertUsable(principal, access.orgId, accountId, plan.model)
    this.deps.plans.assertAllows(access.orgId, plan.model, accountId !== null)
    if (principal.apiKey) assertKeySlot(this.deps.db, principal.apiKey)

    const [snapshot] = initialTransition(sessionMachine, { persistence: plan.persistence, mode: plan.mode, hasSchema: plan.outputSchema !== null })
    const row = newSessionRow({ id, orgId: access.orgId, project, principal, accountId, plan, repository: runRepository(project, named, plan), installation, status: statusOf(snapshot), now: this.now() })
    if (profile) Object.assign(row, profileFields(request, profile, plan))
    if (skills.length > 0) row.effectiveConfig = { ...row.effectiveConfig, skills: SkillService.pins(skills) }
    this.store.insert(row, sessionMachine.getPersistedSnapshot(snapshot), SESSION_MACHINE_VERSION, [statusEvent(0, statusOf(snapshot), id)], () => {
      if (keyed) this.idempotency.claim(keyed.scope, keyed.key, keyed.digest, id)
      this.deps.files.attach(principal, access.orgId, id, attachments)
      this.deps.skills.attach(id, skills)
      this.deps.connections.attach(id, servers)
    })
    this.admit()
    return this.deps.queries.view(this.store.get(id)!)
  }

  /** PATCH `{status}` (spec 4.1): every rule is the machine's; this only maps the answers. */
  async update(access: OrgAccess, principal: Principal, projectRef: string, id: string, status: 'cancelled' | 'paused' | 'running' | 'stop_turn'): Promise<UpdateResult> {
    const row = this.deps.queries.find(access, projectRef, id)
    switch (status) {
      case 'cancelled':
        this.command(row.id, { type: 'cancel' })
        return { kind: 'cancelled' }
      case 'paused':
        this.command(row.id, { type: 'pause' })
        return { kind: 'accepted', operationId: newId() }
      case 'running':
        ownAccountOnly(principal, row, this.deps.connections.names(row.id).length > 0)
        this.command(row.id, { type: 'resume', ...this.slots(row.orgId) })
        return { kind: 'accepted', operationId: newId() }
      case 'stop_turn':
        this.command(row.id, { type: 'stop_turn' })
        try {
          await this.runtime.stopped(row.id, STOP_TURN_TIMEOUT_MS)
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
    ownAccountOnly(principal, row, this.deps.connections.names(row.id).length > 0)
    this.deps.plans.assertAllows(row.orgId, row.model, row.accountId !== null)
    const message = { id: newId(), content }
    const { next, actions } = this.command(row.id, { type: 'message', ...this.slots(row.orgId) }, message)
    if (actions.some((a) => a.type === 'deliverMessage')) return { kind: 'delivered' }
    return { kind: 'queued', messageId: message.id, position: next.context.queued }
  }

  /** A caller's command: refused as the machine says, or 409 when the state has no answer for it. */
  private command(id: string, event: SessionMachineEvent, message?: { id: string; content: string }) {
    const done = this.transit(id, event, {}, message)
    if (!done) throw new ApiError('conflict', `The session cannot take "${event.type}" now`)
    return done
  }

  private slots(orgId: string) {
    return { activeRuns: this.store.countInStatus(orgId, ACTIVE), limit: this.maxConcurrent(orgId), hostFull: this.hostFull() }
  }

  /** Whether the host runs, or starts, as many sandboxes as it may (a new one waits `queued`). */
  private hostFull(): boolean {
    const { maxSandboxes, maxStarting } = this.deps.capacity
    return this.store.countAll(HOST_HELD) >= maxSandboxes || this.store.countAll(['allocating']) >= maxStarting
  }

  /** Expires sessions parked longer than the idle limit; the server calls it periodically. */
  expireIdle(): number {
    this.idempotency.sweep() // on the same tick: keys past their 24 hours go too
    let expired = 0
    const cutoff = this.now() - this.deps.idleMs
    for (const id of this.store.idleSince(PARKABLE, cutoff)) {
      if (this.apply(id, { type: 'idle.timeout' })) expired++
    }
    return expired
  }

  /**
   * At start: sandboxes no live session owns are removed; a turn the last process handed over at a
   * graceful stop is taken over; sessions that were mid-turn otherwise (the service died) get their
   * sandbox back (the driver kills what the lost turn left running) and are told so; queued ones
   * are admitted.
   */
  async rehydrate(): Promise<void> {
    const owners = this.store.inStatus([...IN_PROGRESS, ...PARKABLE]).map((row) => row.id)
    await this.deps.driver.sweep(owners)
    const orgs = new Set<string>()
    // A turn paused mid-way is lost like a running one: its process may be kept (a gVisor checkpoint
    // or freeze), but what read its output went with the old server, so the driver ends it. A session
    // paused between turns keeps everything (the machine ignores the event then).
    const statuses: SessionStatus[] = [...IN_PROGRESS, 'paused']
    for (const row of this.store.inStatus(statuses)) {
      orgs.add(row.orgId)
      if (row.status === 'queued') continue
      // A turn handed over by a graceful stop goes on where it was (gVisor); any other is lost.
      const takenOver = (row.status === 'running' || row.status === 'paused') && (await this.runtime.takeOver(row).catch((err) => {
          this.deps.log(`agentd: session ${row.id}: the turn handed over was lost: ${(err as Error).message}`)
          return false
        }))
      if (takenOver) continue
      await this.runtime.adopt(row.id)
      // The lost turn counts as a turn, so the next one takes the next prompt.
      const lostTurn = row.status === 'running' || row.status === 'paused'
      this.apply(row.id, { type: 'service.restarted' }, lostTurn ? { turnsCount: row.turnsCount + 1 } : {})
    }
    if (orgs.size > 0) this.admit()
  }

  /** Stops or hands over every turn this process runs (tests and graceful shutdown; see SessionRuntime.shutdown). */
  async shutdown(deadline?: number): Promise<void> {
    await this.runtime.shutdown(deadline)
  }

  /**
   * Feeds one event to a session's machine. Returns false (and changes nothing) when the machine
   * does not accept it in its current state, or refuses it. Synchronous: no other event can
   * interleave.
   */
  apply(id: string, event: SessionMachineEvent, patch: SessionPatch = {}): boolean {
    try {
      const done = this.transit(id, event, patch) !== null
      // A turn that ended after its session did (cancelled, failed, expired) still used what it used.
      if (!done && event.type === 'turn.ended') billLateTurn(this.deps.db, this.store.get(id), patch, this.now())
      return done
    } catch (err) {
      if (err instanceof ApiError) return false
      throw err
    }
  }

  /**
   * One transition: the pure `transition()`, a refusal thrown as the ApiError the machine names,
   * then snapshot, status, patch, events and the transition's own writes (follow-up queue, webhook
   * outbox) in one transaction, and only after the commit its effects.
   */
  private transit(id: string, event: SessionMachineEvent, patch: SessionPatch = {}, message?: { id: string; content: string }) {
    // Another writer (a second agentd on the same file) committed between the read and the write:
    // the transition is pure and nothing was carried out yet, so it is simply decided again.
    for (let attempt = 1; ; attempt++) {
      try {
        return this.transitOnce(id, event, patch, message)
      } catch (err) {
        if (!(err instanceof VersionConflict)) throw err
        if (attempt === CONFLICT_ATTEMPTS) throw new ApiError('conflict', 'The session kept changing while this request was answered; try again', 'CONCURRENT_UPDATE')
      }
    }
  }

  private transitOnce(id: string, event: SessionMachineEvent, patch: SessionPatch, message?: { id: string; content: string }) {
    const stored = this.store.snapshotOf(id)
    if (!stored) return null
    const current = sessionMachine.resolveState(stored.snapshot as Parameters<typeof sessionMachine.resolveState>[0])
    if (!current.can(event)) return null
    const [next, actions] = transition(sessionMachine, current, event)
    const refusal = refusalOf(actions)
    if (refusal) throw new ApiError(refusal.kind, refusal.message, refusal.code)
    const from = statusOf(current)
    const status = statusOf(next)
    const row = this.store.get(id)!
    const turnsCount = patch.turnsCount ?? row.turnsCount
    const { ended: turnEnded, as: endedAs } = turnEndOf(current, event, from, status)
    const metered = meterTransition({ row, from, to: status, turnEnded, restarted: event.type === 'service.restarted', patch, now: this.now() })
    const fields: SessionPatch = { ...patch, ...metered.fields, machineState: next.context.machineState, error: next.context.error }
    const writes = () => {
      recordUsage(this.deps.db, metered.usage)
      for (const action of actions) {
        if (action.type === 'enqueueMessage') this.store.insertMessage(id, message!.id, message!.content, 'queued', null)
        if (action.type === 'deliverMessage') this.store.insertMessage(id, message!.id, message!.content, 'delivered', turnsCount + 1)
        if (action.type === 'dequeueMessage') this.store.deliverOldest(id, turnsCount + 1)
        if (action.type === 'dropQueue') this.store.dropQueued(id)
      }
      if (turnEnded && this.deps.onStatusChange) this.deps.onStatusChange({ row, from, to: endedAs, patch: fields })
    }
    const events = status !== from || event.type === 'turn.ended' ? [statusEvent(turnsCount, status, id)] : []
    this.store.commit(id, stored.version, sessionMachine.getPersistedSnapshot(next), status, fields, events, writes)
    if (next.status === 'done') this.store.forget(id)
    this.runtime.carryOut(id, actions)
    if (turnEnded) this.deps.metrics?.turnEnded(endedAs)
    if (from === 'queued' && status !== 'queued') this.deps.metrics?.admitted(this.now() - row.updatedAt)
    // A start finished or a run let go of its sandbox: the host has room for a queued session.
    if (status !== from && (from === 'allocating' || (HOST_HELD.includes(from) && !HOST_HELD.includes(status)))) {
      queueMicrotask(() => this.runtime.closing || this.admit())
    }
    return { next, actions }
  }

  /**
   * A pin on another CLI version: npm must know it (422 otherwise). Its install starts now, in the
   * background, so it is usually ready when the sandbox is; the turn waits for it either way.
   */
  private async resolvePin(plan: SessionPlan): Promise<void> {
    const pkg = this.deps.catalog.harnesses.find((h) => h.id === plan.harness)!.package
    plan.versionResolved = await this.deps.installer.resolve(plan.agent, pkg, plan.versionResolved)
    this.deps.installer.modulesFor(pkg, plan.versionResolved).catch((err) => this.deps.log(`agentd: ${(err as Error).message}`))
  }

  /**
   * Starts queued sessions while the host has room, in the queue's fair order; an org
   * at its plan's limit is passed over and waits for one of its own runs to end.
   */
  admit(): void {
    // Called after others' transitions (a microtask, a create): a failure here is logged, never
    // thrown into a caller it does not concern or out of a microtask, where it would end the process.
    try {
      this.admitQueued()
    } catch (err) {
      this.deps.log(`agentd: admitting queued sessions failed: ${(err as Error).stack ?? err}`)
    }
  }

  private admitQueued(): void {
    if (this.hostFull()) return
    const atLimit = new Set<string>()
    for (const row of this.deps.queue.order(this.store.inStatus(['queued']))) {
      if (atLimit.has(row.orgId)) continue
      const slots = this.slots(row.orgId)
      if (slots.hostFull) return
      if (slots.limit !== null && slots.activeRuns >= slots.limit) {
        atLimit.add(row.orgId)
        continue
      }
      if (this.apply(row.id, { type: 'admit', ...slots })) this.deps.queue.admitted(row.orgId)
    }
  }


  private maxConcurrent(orgId: string): number | null {
    return this.deps.plans.maxConcurrent(orgId) ?? this.deps.defaultMaxConcurrent
  }
}

function statusEvent(turn: number, status: SessionStatus, id: string): NewEvent {
  return { turn, kind: 'status', type: 'status', data: { status, id } }
}

