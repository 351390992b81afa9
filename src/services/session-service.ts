import { eq } from 'drizzle-orm'
import { initialTransition, transition } from 'xstate'
import { SESSION_MACHINE_VERSION, sessionMachine, statusOf, type SessionMachineEvent } from '../../machines/session.machine'
import type { Db } from '../db/client'
import { plans, users } from '../db/schema'
import { conflict, notFound } from '../domain/errors'
import type { Harness } from '../domain/harness'
import { newId } from '../domain/ids'
import type { SessionStatus } from '../domain/status'
import type { HarnessAdapter } from '../harness/harness'
import type { SandboxDriver } from '../../sandbox'
import type { Catalog } from './catalog'
import type { GatewaySessions } from './gateway-sessions'
import type { OrgAccess, Principal } from './identity'
import { findProject, NO_PROJECT } from './projects'
import { planSession, type CreateBody, type HarnessVersions } from './session-create'
import { SessionRuntime } from './session-runtime'
import { SessionStore, type NewEvent, type SessionPatch, type SessionRow } from './session-store'
import { cloudRunSession, sessionResult } from './session-view'

export interface SessionServiceDeps {
  db: Db
  catalog: Catalog
  adapters: Partial<Record<Harness, HarnessAdapter>>
  versions: HarnessVersions
  driver: SandboxDriver
  gatewayUrl: string
  gatewaySessions: GatewaySessions
  dataDir: string
  defaultMaxConcurrent: number
  now?: () => number
  log?: (line: string) => void
}

/** States whose session still occupies a run slot of its org. */
const ACTIVE: SessionStatus[] = ['allocating', 'running']
/** States a restart must look at again. */
const LIVE: SessionStatus[] = ['queued', 'allocating', 'running']

/**
 * Sessions: create, read, cancel, and the machine loop. Each event goes through the pure
 * transition; the snapshot, status column and event rows are committed in one transaction, and
 * only then are the machine's actions carried out (by SessionRuntime).
 */
export class SessionService {
  readonly store: SessionStore
  private readonly runtime: SessionRuntime
  private readonly now: () => number

  constructor(private readonly deps: SessionServiceDeps) {
    this.now = deps.now ?? Date.now
    this.store = new SessionStore(deps.db, this.now)
    this.runtime = new SessionRuntime({
      store: this.store,
      adapters: deps.adapters,
      catalog: deps.catalog,
      driver: deps.driver,
      gatewayUrl: deps.gatewayUrl,
      gatewaySessions: deps.gatewaySessions,
      dataDir: deps.dataDir,
      now: this.now,
      log: deps.log ?? console.error,
      apply: (id, event, patch) => this.apply(id, event, patch),
      admit: (orgId) => this.admit(orgId),
    })
  }

  create(principal: Principal, access: OrgAccess, projectRef: string, body: CreateBody) {
    const projectless = projectRef === NO_PROJECT
    const project = projectless ? null : findProject(this.deps.db, access.orgId, projectRef)
    if (!projectless && !project) throw notFound('Project not found')
    const plan = planSession(body, this.deps.catalog, this.deps.versions, projectless)

    const id = newId()
    const [snapshot] = initialTransition(sessionMachine, {
      persistence: plan.persistence,
      mode: plan.mode,
      hasSchema: plan.outputSchema !== null,
    })
    const now = this.now()
    this.store.insert(
      {
        id,
        orgId: access.orgId,
        projectId: project?.id ?? null,
        startedByUserId: principal.userId,
        agent: plan.agent,
        harness: plan.harness,
        harnessVersionRequested: plan.versionRequested,
        harnessVersionResolved: plan.versionResolved,
        status: statusOf(snapshot),
        mode: plan.mode,
        persistenceMode: plan.persistence,
        prompt: plan.prompt,
        title: plan.title,
        repoOwner: project?.repoOwner ?? null,
        repoName: project?.repoName ?? null,
        baseBranch: plan.baseBranch,
        branch: plan.baseBranch,
        onPr: plan.onPr,
        model: plan.model,
        requestedModel: plan.requestedModel,
        effort: plan.effort,
        speed: plan.speed,
        outputSchema: plan.outputSchema,
        effectiveConfig: { harness_version: plan.versionResolved },
        createdAt: now,
        updatedAt: now,
      },
      sessionMachine.getPersistedSnapshot(snapshot),
      SESSION_MACHINE_VERSION,
      [statusEvent(0, statusOf(snapshot), id)],
    )
    this.admit(access.orgId)
    return this.view(this.store.get(id)!)
  }

  get(access: OrgAccess, projectRef: string, id: string) {
    return this.view(this.find(access, projectRef, id))
  }

  result(access: OrgAccess, projectRef: string, id: string) {
    return sessionResult(this.find(access, projectRef, id))
  }

  list(access: OrgAccess, projectRef: string, query: { status?: SessionStatus; limit?: number }) {
    let projectId: string | undefined
    if (projectRef !== NO_PROJECT) {
      const project = findProject(this.deps.db, access.orgId, projectRef)
      if (!project) throw notFound('Project not found')
      projectId = project.id
    }
    const rows = this.store.list({ orgId: access.orgId, projectId, status: query.status, limit: query.limit ?? 50 })
    return { executions: rows.map((row) => this.view(row)) }
  }

  cancel(access: OrgAccess, projectRef: string, id: string) {
    const row = this.find(access, projectRef, id)
    if (!this.apply(row.id, { type: 'cancel' })) throw conflict(`session is already ${row.status}; only a live session can be cancelled`)
    return { ok: true as const, status: 'cancelled' as const }
  }

  /** At start: sessions that were mid-turn when the service died are ended; queued ones admitted. */
  rehydrate(): void {
    const orgs = new Set<string>()
    for (const row of this.store.inStatus(LIVE)) {
      orgs.add(row.orgId)
      if (row.status === 'queued') continue
      this.runtime.reapOrphans(row.id)
      this.apply(row.id, { type: 'service.restarted' })
    }
    for (const orgId of orgs) this.admit(orgId)
  }

  /** Stops every turn this process runs (tests and graceful shutdown). */
  async shutdown(): Promise<void> {
    await this.runtime.shutdown()
  }

  /**
   * Feeds one event to a session's machine. Returns false (and changes nothing) when the machine
   * does not accept it in its current state. Synchronous: no other event can interleave.
   */
  apply(id: string, event: SessionMachineEvent, patch: SessionPatch = {}): boolean {
    const stored = this.store.snapshotOf(id)
    if (!stored) return false
    const current = sessionMachine.resolveState(stored.snapshot as Parameters<typeof sessionMachine.resolveState>[0])
    if (!current.can(event)) return false
    const [next, actions] = transition(sessionMachine, current, event)
    const status = statusOf(next)
    const changed = status !== statusOf(current)
    const turn = this.store.get(id)?.turnsCount ?? 0
    const fields: SessionPatch = { ...patch, machineState: next.context.machineState, ...(next.context.error ? { error: next.context.error } : {}) }
    this.store.commit(id, stored.version, sessionMachine.getPersistedSnapshot(next), status, fields, changed ? [statusEvent(turn, status, id)] : [])
    if (next.status === 'done') this.store.forget(id)
    this.runtime.carryOut(id, actions)
    return true
  }

  /** Moves queued sessions of an org to allocating, oldest first, while the plan allows. */
  private admit(orgId: string): void {
    const limit = this.maxConcurrent(orgId)
    for (const row of this.store.inStatus(['queued'], orgId)) {
      const activeRuns = this.store.countInStatus(orgId, ACTIVE)
      if (!this.apply(row.id, { type: 'admit', activeRuns, limit })) break
    }
  }

  private maxConcurrent(orgId: string): number | null {
    const plan = this.deps.db.select({ max: plans.maxConcurrent }).from(plans).where(eq(plans.orgId, orgId)).get()
    return plan?.max ?? this.deps.defaultMaxConcurrent
  }

  private find(access: OrgAccess, projectRef: string, id: string): SessionRow {
    const row = this.store.get(id)
    if (!row || row.orgId !== access.orgId) throw notFound('Session not found')
    if (projectRef !== NO_PROJECT) {
      const project = findProject(this.deps.db, access.orgId, projectRef)
      if (!project || project.id !== row.projectId) throw notFound('Session not found')
    }
    return row
  }

  private view(row: SessionRow) {
    const user = row.startedByUserId ? this.deps.db.select().from(users).where(eq(users.id, row.startedByUserId)).get() : undefined
    return cloudRunSession(row, user ? { name: user.name, avatar_url: user.avatarUrl } : null)
  }
}

function statusEvent(turn: number, status: SessionStatus, id: string): NewEvent {
  return { turn, kind: 'status', type: 'status', data: { status, id } }
}
