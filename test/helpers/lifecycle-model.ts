/**
 * The test model of the session lifecycle: which machine events the real system can produce in
 * each state (the environment), shortest paths to every state and every transition generated with
 * @xstate/graph, and their arrangement into runs (one session each) for the HTTP path tests.
 */
import { getShortestPaths } from '@xstate/graph'
import { initialTransition, transition } from 'xstate'
import { chartTransitions, transitionTaken, type ChartTransition } from '../../machines/chart'
import {
  refusalOf,
  sessionMachine,
  type SessionInput,
  type SessionMachineEvent,
  type SessionSnapshot,
} from '../../machines/session.machine'

export const VARIANTS = {
  resumable: { persistence: 'resumable', mode: 'headless', hasSchema: false },
  ephemeral: { persistence: 'ephemeral', mode: 'headless', hasSchema: false },
  interactive: { persistence: 'resumable', mode: 'interactive', hasSchema: false },
  schema: { persistence: 'resumable', mode: 'headless', hasSchema: true },
  ephemeralInteractive: { persistence: 'ephemeral', mode: 'interactive', hasSchema: false },
  ephemeralSchema: { persistence: 'ephemeral', mode: 'headless', hasSchema: true },
} as const satisfies Record<string, SessionInput>
export type Variant = keyof typeof VARIANTS

/** Every run's org allows one run at a time: "full" means another run holds that slot. */
export const SLOT = { activeRuns: 0, limit: 1 } as const
export const FULL = { activeRuns: 1, limit: 1 } as const

const ended = (error: string | null, schemaValid: boolean | null, stopped = false): SessionMachineEvent => ({
  type: 'turn.ended',
  error,
  schemaValid,
  stopped,
})
/** A fork (POST …/fork): the runner names the fork it made, the machine only passes the id on. */
export const FORK: SessionMachineEvent = { type: 'fork', into: 'fork' }
export const SANDBOX_FAILED: SessionMachineEvent = { type: 'sandbox.failed', error: 'the sandbox could not start' }
/** A turn killed by the turn time limit (AGENTD_TURN_TIMEOUT_S) ends with an error. */
export const TIMED_OUT: SessionMachineEvent = ended('the turn ran longer than the limit and was stopped', null)
/** What the running system does on its own right after an event, before anything else can happen. */
export function consequenceOf(before: SessionSnapshot, event: SessionMachineEvent): SessionMachineEvent | null {
  // PATCH stop_turn answers once the CLI has exited: the turn has ended, with no answer.
  if (event.type === 'stop_turn' && before.value === 'running') return ended(null, null, true)
  return null
}

/**
 * The events the running system can produce in a state, as the test can cause them:
 * - a pause mid-turn is followed by `sandbox.parked`, a wake by `sandbox.woken` (or, when the
 *   sandbox's disk is gone, `sandbox.failed`), before anything else can happen;
 * - while a mid-turn park is still landing, the turn can reach its answer (the test holds the
 *   park); its error ending is left to the time limit below, so that limit keeps a path;
 * - `stop_turn` on a running turn is followed by the turn's end (`consequenceOf`);
 * - a parked turn cannot end by itself: the only end it meets is the turn time limit (`TIMED_OUT`);
 * - past two waiting follow-ups, only more follow-ups are sent (to reach the queue limit).
 * Only events the machine has a transition for are offered.
 */
export function environmentEvents(snapshot: SessionSnapshot): SessionMachineEvent[] {
  const { context } = snapshot
  let events: SessionMachineEvent[]
  // With two follow-ups waiting, a third changes nothing but the count: past that only more
  // follow-ups are sent, up to the queue limit.
  if (context.queued >= 2) return snapshot.value === 'running' && context.machineState === 'running' ? [{ type: 'message', ...SLOT }] : []
  switch (snapshot.value) {
    case 'queued':
      events = [
        { type: 'admit', ...SLOT },
        { type: 'cancel' },
        { type: 'message', ...SLOT },
        { type: 'pause' },
        { type: 'resume', ...SLOT },
        { type: 'stop_turn' },
        FORK,
      ]
      break
    case 'allocating':
      events = [
        { type: 'sandbox.ready' },
        { type: 'cancel' },
        { type: 'message', ...SLOT },
        { type: 'pause' },
        { type: 'resume', ...SLOT },
        { type: 'stop_turn' },
        SANDBOX_FAILED,
        { type: 'service.restarted' },
        FORK,
      ]
      break
    case 'running':
      if (context.machineState === 'resuming') {
        events = [{ type: 'sandbox.woken' }, SANDBOX_FAILED]
        break
      }
      events = [
        ended(null, context.hasSchema ? true : null),
        ended('scripted failure', null),
        ...(context.hasSchema ? [ended(null, false)] : []),
        { type: 'message', ...SLOT },
        { type: 'pause' },
        { type: 'stop_turn' },
        { type: 'resume', ...SLOT },
        { type: 'cancel' },
        { type: 'service.restarted' },
        FORK,
      ]
      break
    case 'paused':
      if (context.machineState === 'pausing') {
        events = [
          { type: 'sandbox.parked' },
          ...(context.turnActive ? [ended(null, context.hasSchema ? true : null), ...(context.hasSchema ? [ended(null, false)] : [])] : []),
        ]
        break
      }
      events = [
        { type: 'resume', ...SLOT },
        { type: 'resume', ...FULL },
        { type: 'message', ...SLOT },
        { type: 'message', ...FULL },
        { type: 'pause' },
        { type: 'stop_turn' },
        { type: 'cancel' },
        { type: 'idle.timeout' },
        { type: 'service.restarted' },
        FORK,
        ...(context.turnActive ? [TIMED_OUT] : []),
      ]
      break
    case 'cancelled':
    case 'expired':
      events = [
        { type: 'cancel' },
        { type: 'message', ...SLOT },
        { type: 'pause' },
        { type: 'resume', ...SLOT },
        { type: 'stop_turn' },
        FORK,
      ]
      break
    default:
      // Between turns: completed, failed, needs_review, input_required.
      events = [
        { type: 'message', ...SLOT },
        { type: 'message', ...FULL },
        { type: 'pause' },
        { type: 'resume', ...SLOT },
        { type: 'stop_turn' },
        { type: 'cancel' },
        { type: 'idle.timeout' },
        FORK,
      ]
  }
  return events.filter((event) => transitionTaken(snapshot, event, sessionMachine, ROWS) !== null)
}

export const ROWS: ChartTransition[] = chartTransitions()

/** What identifies a state for the traversal: the state and the context the guards read (not the error text). */
export function stateKey(snapshot: SessionSnapshot): string {
  const { error: _error, ...context } = snapshot.context
  return JSON.stringify({ value: snapshot.value, ...context })
}

export interface ModelPath {
  variant: Variant
  events: SessionMachineEvent[]
  /** The row each event takes, in order. */
  rows: ChartTransition[]
}

/** One step of the environment: the event, then its consequence if it has one. */
export function step(snapshot: SessionSnapshot, event: SessionMachineEvent): SessionSnapshot {
  const [next] = transition(sessionMachine, snapshot, event)
  const consequence = consequenceOf(snapshot, event)
  return consequence ? transition(sessionMachine, next, consequence)[0] : next
}

/** The machine as the environment drives it (consequences included), for the traversal. */
const environment: typeof sessionMachine = Object.create(sessionMachine, {
  transition: { value: (snapshot: SessionSnapshot, event: SessionMachineEvent) => step(snapshot, event) },
})

function toModelPath(variant: Variant, events: SessionMachineEvent[]): ModelPath {
  let [snapshot] = initialTransition(sessionMachine, VARIANTS[variant])
  const rows: ChartTransition[] = []
  for (const event of events) {
    rows.push(transitionTaken(snapshot, event, sessionMachine, ROWS)!)
    snapshot = step(snapshot, event)
  }
  return { variant, events, rows }
}

const stepsOf = (path: { steps: { event: { type: string } }[] }) => path.steps.slice(1).map((s) => s.event as SessionMachineEvent)

/**
 * Shortest paths to every state (by state node) and to every transition (chart row), over all
 * variants; on a tie the earlier variant and the earlier event win, so the cheapest causes are used.
 */
export function generatePaths() {
  const toRow = new Map<string, ModelPath>()
  const toState = new Map<string, ModelPath>()
  let vertices = 0
  for (const variant of Object.keys(VARIANTS) as Variant[]) {
    const input = VARIANTS[variant]
    // A vertex is a state together with the transition that led to it: the shortest path to each
    // vertex is then the shortest path ending with that transition, refusals included.
    const byTransition = getShortestPaths(environment, {
      input,
      events: environmentEvents,
      serializeState: (state, event, previous) =>
        `${stateKey(state)}|${event && previous ? transitionTaken(previous, event, sessionMachine, ROWS)!.key : 'init'}`,
    })
    vertices += byTransition.length
    for (const path of byTransition) {
      const events = stepsOf(path)
      if (events.length === 0) continue
      const model = toModelPath(variant, events)
      const row = model.rows.at(-1)!.key
      const known = toRow.get(row)
      if (!known || known.events.length > events.length) toRow.set(row, model)
    }
    const byState = getShortestPaths(environment, { input, events: environmentEvents, serializeState: (state) => stateKey(state) })
    for (const path of byState) {
      const value = String(path.state.value)
      const known = toState.get(value)
      const events = stepsOf(path)
      if (!known || known.events.length > events.length) toState.set(value, toModelPath(variant, events))
    }
  }
  return { toRow, toState, vertices }
}

/** A refusal leaves the snapshot as it was: such a step can be tried at its state during any run. */
export function isRefusal(snapshot: SessionSnapshot, event: SessionMachineEvent): boolean {
  return refusalOf(transition(sessionMachine, snapshot, event)[1]) !== null
}

export type Group = 'main' | 'restart' | 'crash' | 'idle' | 'timeout'

/** A node of the run tree: the state after a prefix of events, with the refusals to try there. */
export interface RunNode {
  event: SessionMachineEvent | null
  children: RunNode[]
  probes: SessionMachineEvent[]
}

export interface Run {
  group: Group
  variant: Variant
  /** The events of the run, in order (no refusals). */
  events: SessionMachineEvent[]
  /** probes[i]: refusals to try in the state after i events (0: the initial state). */
  probes: SessionMachineEvent[][]
}

/** Which environment a path needs: a restart of agentd, a crash while a sandbox starts, or a short idle limit. */
export function groupOf(path: ModelPath): Group {
  let [snapshot] = initialTransition(sessionMachine, VARIANTS[path.variant])
  let group: Group = 'main'
  for (const event of path.events) {
    if (event.type === 'service.restarted') group = snapshot.value === 'allocating' ? 'crash' : 'restart'
    // A wake that fails: the sandbox's disk was lost while agentd was down.
    if (event.type === 'sandbox.failed' && snapshot.value === 'running') group = 'restart'
    // A turn ending once parked is the time limit's; one ending while its park lands is not.
    const parkedEnd = event.type === 'turn.ended' && snapshot.value === 'paused' && snapshot.context.machineState === 'paused'
    const special: Group | null = event.type === 'idle.timeout' ? 'idle' : parkedEnd ? 'timeout' : null
    if (special) {
      if (group !== 'main') throw new Error(`a path needs two environments: ${group} and ${special}`)
      group = special
    }
    snapshot = step(snapshot, event)
  }
  return group
}

const eventKey = (event: SessionMachineEvent) => JSON.stringify(event)

/**
 * Arranges paths into runs: paths sharing a prefix share a session, and a path ending in a refusal
 * becomes a probe at the state where it is tried. Each leaf of the tree is one run.
 */
export function planRuns(paths: ModelPath[]): Run[] {
  const trees = new Map<string, RunNode>()
  for (const path of paths) {
    const treeKey = `${groupOf(path)} ${path.variant}`
    let node = trees.get(treeKey) ?? { event: null, children: [], probes: [] }
    trees.set(treeKey, node)
    let [snapshot] = initialTransition(sessionMachine, VARIANTS[path.variant])
    for (const event of path.events) {
      if (isRefusal(snapshot, event)) {
        if (!node.probes.some((p) => eventKey(p) === eventKey(event))) node.probes.push(event)
        continue
      }
      let child = node.children.find((c) => eventKey(c.event!) === eventKey(event))
      if (!child) {
        child = { event, children: [], probes: [] }
        node.children.push(child)
      }
      node = child
      snapshot = step(snapshot, event)
    }
  }
  const runs: Run[] = []
  for (const [treeKey, root] of trees) {
    const [group, variant] = treeKey.split(' ') as [Group, Variant]
    // Depth first; each node's probes are tried by the first run that passes it.
    const visit = (node: RunNode, events: SessionMachineEvent[], probes: SessionMachineEvent[][]) => {
      if (node.children.length === 0) {
        runs.push({ group, variant, events, probes })
        return
      }
      node.children.forEach((child, i) => {
        // The first child's run carries the probes gathered so far; later ones start with none.
        const carried = i === 0 ? probes : probes.map(() => [])
        visit(child, [...events, child.event!], [...carried, child.probes])
      })
    }
    visit(root, [], [root.probes])
  }
  return runs
}

/**
 * Rows no sequence of events reaches, whatever the environment does: every event, with every
 * payload that matters, in every state of every variant. A row here is a branch of the machine
 * that cannot be taken, not a gap in the tests.
 */
export function unreachableRows(): ChartTransition[] {
  const taken = new Set<string>()
  const endings = [ended(null, null), ended(null, true), ended(null, false), ended('x', null), ended(null, null, true)]
  const all = (snapshot: SessionSnapshot): SessionMachineEvent[] => {
    // As in the environment: more follow-ups only matter for the queue limit.
    if (snapshot.context.queued >= 2) return snapshot.value === 'running' ? [{ type: 'message', ...SLOT }] : []
    const events: SessionMachineEvent[] = [
      ...[SLOT, FULL].flatMap((slots) => [
        { type: 'admit', ...slots } as const,
        { type: 'message', ...slots } as const,
        { type: 'resume', ...slots } as const,
      ]),
      ...endings,
      { type: 'sandbox.ready' },
      SANDBOX_FAILED,
      { type: 'sandbox.parked' },
      { type: 'sandbox.woken' },
      { type: 'cancel' },
      { type: 'pause' },
      { type: 'stop_turn' },
      { type: 'idle.timeout' },
      { type: 'service.restarted' },
      FORK,
    ]
    return events.filter((event) => transitionTaken(snapshot, event, sessionMachine, ROWS) !== null)
  }
  for (const input of Object.values(VARIANTS)) {
    getShortestPaths(sessionMachine, {
      input,
      events: all,
      serializeState: (state, event, previous) => {
        if (event && previous) taken.add(transitionTaken(previous, event, sessionMachine, ROWS)!.key)
        return stateKey(state)
      },
    })
  }
  return ROWS.filter((row) => !taken.has(row.key))
}
