import { isDeepStrictEqual } from 'node:util'
import { transition } from 'xstate'
import { refusalOf, sessionMachine, statusOf, type SessionMachineEvent } from '../../machines/session.machine'
import type { HostCapacity } from '../config'
import type { Db } from '../db/client'
import { ApiError } from '../domain/errors'
import { STATUS_GROUPS, type SessionStatus } from '../domain/status'
import type { Metrics } from '../metrics/metrics'
import { billLateTurn, meterTransition, recordUsage } from '../plans/meter'
import type { PlanService } from '../plans/service'
import type { SessionRuntime } from '../runtime/session-runtime'
import type { SessionInbox, TurnEndedPort } from '../session-record/ports'
import { type NewEvent, type SessionPatch, type SessionStore, VersionConflict } from '../session-record/store'
import type { AdmissionQueue } from './admission'
import { turnEndOf } from './turn-end-of'

export interface SessionActorDeps {
  db: Db
  store: SessionStore
  /** Carries out the machine's actions once their transition is committed. */
  runtime: SessionRuntime
  plans: Pick<PlanService, 'maxConcurrent'>
  metrics?: Metrics
  /** Runs at once per org when its plan sets none. */
  defaultMaxConcurrent: number
  /** What the host runs at once, whatever the plans allow. */
  capacity: Pick<HostCapacity, 'maxSandboxes' | 'maxStarting'>
  /** The fair order queued sessions start in (shared with the read side's places). */
  queue: AdmissionQueue
  /** How long a parked session waits before `idle.timeout`. */
  idleMs: number
  now: () => number
  log: (line: string) => void
  /** Told inside the transaction that ends a turn (or a run that never got to one): webhooks. */
  turnEnded?: TurnEndedPort
}

/** Actions that write inside the transition's transaction. */
const TRANSACTIONAL_ACTIONS = new Set(['enqueueMessage', 'deliverMessage', 'dequeueMessage', 'dropQueue'])

/** How often a transition is decided again when another writer got in first. */
const CONFLICT_ATTEMPTS = 3

const { active: ACTIVE, parkable: PARKABLE, inProgress: IN_PROGRESS } = STATUS_GROUPS

/**
 * Statuses whose sandbox the host holds: starting, running a turn, or paused (a turn paused on
 * bwrap, or on gVisor when it could not be checkpointed, stays frozen in memory).
 */
export const HOST_HELD: readonly SessionStatus[] = [...ACTIVE, 'paused']

/**
 * The sessions' machine loop, the one way a session's status changes: every event (a caller's
 * command, the runtime's report, admission, idle expiry, a restart) goes through the pure
 * `transition()`; the snapshot, status column, events and the transition's own writes commit in one
 * transaction, and only then does the runtime carry out its actions.
 */
export class SessionActor implements SessionInbox {
  private readonly store: SessionStore
  private readonly runtime: SessionRuntime
  private readonly now: () => number

  constructor(private readonly deps: SessionActorDeps) {
    this.store = deps.store
    this.runtime = deps.runtime
    this.now = deps.now
  }

  /** A caller's command: refused as the machine says, or 409 when the state has no answer for it. */
  command(id: string, event: SessionMachineEvent, message?: { id: string; content: string }) {
    const done = this.transit(id, event, {}, message)
    if (!done) throw new ApiError('conflict', `The session cannot take "${event.type}" now`)
    return done
  }

  /** What admission rules weigh for an org's next run: its active runs, its plan's limit, the host's room. */
  slots(orgId: string) {
    return { activeRuns: this.store.countInStatus(orgId, ACTIVE), limit: this.maxConcurrent(orgId), hostFull: this.hostFull() }
  }

  /** Whether the host runs, or starts, as many sandboxes as it may (a new one waits `queued`). */
  private hostFull(): boolean {
    const { maxSandboxes, maxStarting } = this.deps.capacity
    return this.store.countAll(HOST_HELD) >= maxSandboxes || this.store.countAll(['allocating']) >= maxStarting
  }

  /** Expires sessions parked longer than the idle limit; the server calls it periodically. */
  expireIdle(): number {
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
    await this.runtime.sweep(owners)
    const orgs = new Set<string>()
    // A turn paused mid-way is lost like a running one: its process may be kept (a gVisor checkpoint
    // or freeze), but what read its output went with the old server, so the driver ends it. A session
    // paused between turns keeps everything (the machine ignores the event then).
    const statuses: SessionStatus[] = [...IN_PROGRESS, 'paused']
    for (const row of this.store.inStatus(statuses)) {
      orgs.add(row.orgId)
      if (row.status === 'queued') continue
      // A turn handed over by a graceful stop goes on where it was (gVisor); any other is lost.
      // A turn whose sandbox was on a node lost to this one (a new primary's) is lost with it.
      const lost = this.runtime.lostNodeOf(row.id)
      const takenOver =
        !lost &&
        (row.status === 'running' || row.status === 'paused') &&
        (await this.runtime.takeOver(row).catch((err) => {
          this.deps.log(`agentd: session ${row.id}: the turn handed over was lost: ${(err as Error).message}`)
          return false
        }))
      if (takenOver) continue
      await this.runtime.adopt(row.id)
      // The lost turn counts as a turn, so the next one takes the next prompt.
      const lostTurn = row.status === 'running' || row.status === 'paused'
      const restarted = lost ? { type: 'service.restarted' as const, error: `node lost: ${lost}` } : { type: 'service.restarted' as const }
      this.apply(row.id, restarted, lostTurn ? { turnsCount: row.turnsCount + 1 } : {})
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
        if (attempt === CONFLICT_ATTEMPTS)
          throw new ApiError('conflict', 'The session kept changing while this request was answered; try again', 'CONCURRENT_UPDATE')
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
    const metered = meterTransition({
      row,
      from,
      to: status,
      turnEnded,
      restarted: event.type === 'service.restarted',
      patch,
      now: this.now(),
    })
    const persisted = sessionMachine.getPersistedSnapshot(next)
    // A transition that changes nothing stored (a fork's: only the sandbox is copied) writes nothing,
    // so the session stays as it was, `updated_at` and idle clock included.
    const writesNothing =
      status === from &&
      event.type !== 'turn.ended' &&
      !turnEnded &&
      metered.usage.length === 0 &&
      Object.keys({ ...patch, ...metered.fields }).length === 0 &&
      actions.every((action) => !TRANSACTIONAL_ACTIONS.has(action.type)) &&
      isDeepStrictEqual(JSON.parse(JSON.stringify(persisted)), stored.snapshot)
    if (writesNothing) {
      this.runtime.carryOut(id, actions)
      return { next, actions }
    }
    const fields: SessionPatch = { ...patch, ...metered.fields, machineState: next.context.machineState, error: next.context.error }
    const writes = () => {
      recordUsage(this.deps.db, metered.usage)
      for (const action of actions) {
        if (action.type === 'enqueueMessage') this.store.insertMessage(id, message!.id, message!.content, 'queued', null)
        if (action.type === 'deliverMessage') this.store.insertMessage(id, message!.id, message!.content, 'delivered', turnsCount + 1)
        if (action.type === 'dequeueMessage') this.store.deliverOldest(id, turnsCount + 1)
        if (action.type === 'dropQueue') this.store.dropQueued(id)
      }
      if (turnEnded) this.deps.turnEnded?.turnEnded({ row, from, to: endedAs, patch: fields })
    }
    const events = status !== from || event.type === 'turn.ended' ? [statusEvent(turnsCount, status, id)] : []
    this.store.commit(id, stored.version, persisted, status, fields, events, writes)
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

export function statusEvent(turn: number, status: SessionStatus, id: string): NewEvent {
  return { turn, kind: 'status', type: 'status', data: { status, id } }
}
