import { assign, setup, type SnapshotFrom } from 'xstate'
import type { MachineState, PersistenceMode, RunMode, SessionStatus } from '../src/domain/status'

/**
 * The session lifecycle: one state per SessionStatus (spec section 3, contract section 5).
 * The machine holds every lifecycle rule, refusals included: a command the current state does not
 * allow is answered with the `refuse` action naming the kind of refusal and its code. The session actor feeds
 * events, writes the new snapshot, and only then carries out the named actions.
 */

/** Where a session rests between turns; a between-turns pause returns there on resume. */
export type RestStatus = 'completed' | 'needs_review' | 'failed' | 'input_required'

export interface SessionContext {
  persistence: PersistenceMode
  mode: RunMode
  hasSchema: boolean
  machineState: MachineState | null
  error: string | null
  /** A sandbox exists (running or parked) that a next turn can use. */
  hasSandbox: boolean
  /** A turn is in progress; also true while it is paused mid-turn. */
  turnActive: boolean
  /** Follow-ups waiting for the running turn to end. */
  queued: number
  restStatus: RestStatus | null
}

export type SessionInput = Pick<SessionContext, 'persistence' | 'mode' | 'hasSchema'>

/** Admission data the session actor measures at the moment of the event. */
interface Slots {
  /** The org's runs holding a slot, and its plan's limit (null: none). */
  activeRuns: number
  limit: number | null
  /** The host runs or starts as many sandboxes as it can (AGENTD_MAX_SANDBOXES / _STARTING). */
  hostFull?: boolean
}

export type SessionMachineEvent =
  | ({ type: 'admit' } & Slots)
  | { type: 'sandbox.ready' }
  | { type: 'sandbox.failed'; error: string }
  | { type: 'sandbox.parked' }
  | { type: 'sandbox.woken' }
  | { type: 'turn.ended'; error: string | null; schemaValid: boolean | null; stopped: boolean }
  | { type: 'cancel' }
  | { type: 'pause' }
  | ({ type: 'resume' } & Slots)
  | { type: 'stop_turn' }
  | ({ type: 'message' } & Slots)
  | { type: 'idle.timeout' }
  /** A fork (contract section 13): the parked sandbox is copied into the new session `into`, the source unchanged. */
  | { type: 'fork'; into: string }
  /** `error`: why the turn was lost when it is not the restart itself (the node of its sandbox lost). */
  | { type: 'service.restarted'; error?: string }

/** A command the state does not take: what kind of refusal (src/http/errors.ts gives it a status), why, and the spec's code. */
export interface Refusal {
  kind: 'conflict' | 'rate_limited'
  code?: string
  message: string
}

function hasSlot(event: SessionMachineEvent): boolean {
  return 'activeRuns' in event && !event.hostFull && (event.limit === null || event.activeRuns < event.limit)
}

/** Bump on any change that makes stored snapshots unreadable by the new definition. */
export const SESSION_MACHINE_VERSION = 2

/** At most this many follow-ups wait behind a running turn (spec section 8). */
export const QUEUE_LIMIT = 20

const RESTARTED = 'agentd restarted while this turn was running; the turn was lost'

const refuse = (kind: Refusal['kind'], message: string, code?: string) =>
  ({ type: 'refuse', params: { kind, message, ...(code ? { code } : {}) } satisfies Refusal }) as const

const finished = refuse('conflict', 'The session already finished')
const terminal = refuse('conflict', 'The session is closed and takes no more messages', 'TASK_TERMINAL')
const notStarted = refuse('conflict', 'The session has not started yet; send the message once it runs')
const noTurn = refuse('conflict', 'The session has no turn in progress', 'NO_ACTIVE_TURN')
const noSandboxToPause = refuse('conflict', 'The session has no sandbox to pause')
const notPaused = refuse('conflict', 'The session is not paused')
const notForkable = (why: string) =>
  refuse('conflict', `Only a resumable session parked between turns can be forked: ${why}`, 'NOT_FORKABLE')
const overLimit = refuse(
  'conflict',
  'Waking this session would exceed the plan’s concurrent runs or what the host runs at once; try again when a run ends',
  'CONCURRENCY_LIMIT_REACHED',
)

// Every end of a turn: count it off; the sandbox is parked (resumable) or destroyed (ephemeral).
const turnOver = [
  'endTurn',
  'machineTurnOver',
  { type: 'releaseSandbox', params: ({ context }: { context: SessionContext }) => ({ keep: context.persistence === 'resumable' }) },
  'admitQueued',
] as const

// A follow-up that starts a turn on the existing sandbox (woken first when parked).
const deliverNow = ['machineResuming', 'wakeSandbox', 'deliverMessage', 'beginTurn', 'startTurn'] as const

// Cancel of a live session: its sandbox (and a running turn) go, its queue is dropped.
const cancelLive = {
  target: 'cancelled',
  actions: ['machineStopped', 'killTurn', 'destroySandbox', 'dropQueue', 'clearQueue', 'admitQueued'],
} as const

// Follow-ups between turns: a resumable session wakes its parked sandbox for them.
const followUp = [
  { guard: 'isEphemeral', actions: [terminal] },
  // No free slot: the follow-up waits in the queue like a new run would.
  { guard: 'overConcurrency', target: 'queued', actions: ['enqueueMessage', 'countQueued', 'clearError'] },
  { target: 'running', actions: ['clearError', ...deliverNow] },
] as const

const intoOf = ({ event }: { event: SessionMachineEvent }) => ({ into: 'into' in event ? event.into : '' })
// A fork of a session parked between turns: its sandbox is copied, nothing of the source changes.
const forkParked = [
  { guard: 'isEphemeral', actions: [notForkable('this one is ephemeral')] },
  { guard: 'noSandbox', actions: [notForkable('its sandbox is gone')] },
  { actions: [{ type: 'forkSandbox', params: intoOf }] },
] as const

// A state between turns: a resumable session with a parked sandbox takes follow-ups here.
const betweenTurns = {
  message: followUp,
  fork: forkParked,
  pause: [{ guard: 'hasSandbox', target: 'paused' }, { actions: [noSandboxToPause] }],
  'idle.timeout': { guard: 'hasSandbox', target: 'expired', actions: ['machineStopped', 'destroySandbox'] },
} as const

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionMachineEvent,
    input: {} as SessionInput,
  },
  guards: {
    withinConcurrency: ({ event }) => hasSlot(event),
    overConcurrency: ({ event }) => !hasSlot(event),
    parkedWithinConcurrency: ({ context, event }) => context.hasSandbox && hasSlot(event),
    midTurnOverConcurrency: ({ context, event }) => context.turnActive && !hasSlot(event),
    noSandbox: ({ context }) => !context.hasSandbox,
    turnFailed: ({ event }) => event.type === 'turn.ended' && event.error !== null && !event.stopped,
    answerUnproven: ({ context, event }) =>
      context.hasSchema && event.type === 'turn.ended' && !event.stopped && event.schemaValid !== true,
    isInteractive: ({ context }) => context.mode === 'interactive',
    isEphemeral: ({ context }) => context.persistence === 'ephemeral',
    hasSandbox: ({ context }) => context.hasSandbox,
    hasQueued: ({ context }) => context.queued > 0,
    queueFull: ({ context }) => context.queued >= QUEUE_LIMIT,
    turnActive: ({ context }) => context.turnActive,
    restsInNeedsReview: ({ context }) => context.restStatus === 'needs_review',
    restsInFailed: ({ context }) => context.restStatus === 'failed',
    restsInInputRequired: ({ context }) => context.restStatus === 'input_required',
  },
  actions: {
    // Effects the runtime carries out after the session actor commits the transition.
    provisionSandbox: () => {},
    startTurn: () => {},
    stopTurn: () => {},
    killTurn: () => {},
    parkSandbox: () => {},
    wakeSandbox: () => {},
    // keep: park the sandbox for follow-ups (resumable) instead of destroying it (ephemeral).
    releaseSandbox: (_, _params: { keep: boolean }) => {},
    // into: the fork whose sandbox becomes a copy of this one's, as parked.
    forkSandbox: (_, _params: { into: string }) => {},
    destroySandbox: () => {},
    admitQueued: () => {},
    // Written by the service in the same transaction as the snapshot.
    enqueueMessage: () => {},
    deliverMessage: () => {},
    dequeueMessage: () => {},
    dropQueue: () => {},
    refuse: (_, _params: Refusal) => {},
    // Context bookkeeping.
    beginTurn: assign({ turnActive: true, restStatus: null }),
    restCompleted: assign({ restStatus: 'completed' as const }),
    restNeedsReview: assign({ restStatus: 'needs_review' as const }),
    restFailed: assign({ restStatus: 'failed' as const }),
    restInputRequired: assign({ restStatus: 'input_required' as const }),
    endTurn: assign({ turnActive: false }),
    countQueued: assign({ queued: ({ context }) => context.queued + 1 }),
    countDequeued: assign({ queued: ({ context }) => context.queued - 1 }),
    clearQueue: assign({ queued: 0 }),
    sandboxUp: assign({ hasSandbox: true }),
    sandboxGone: assign({ hasSandbox: false }),
    recordError: assign({
      error: ({ event }) => (event.type === 'sandbox.failed' || event.type === 'turn.ended' ? event.error : null),
    }),
    recordRestart: assign({ error: ({ event }) => (event.type === 'service.restarted' && event.error) || RESTARTED }),
    clearError: assign({ error: null }),
    machinePreparing: assign({ machineState: () => 'preparing' as const }),
    machineRunning: assign({ machineState: () => 'running' as const }),
    machinePausing: assign({ machineState: () => 'pausing' as const }),
    machineParked: assign({ machineState: () => 'paused' as const }),
    machineResuming: assign({ machineState: () => 'resuming' as const }),
    machineTurnOver: assign({
      machineState: ({ context }) => (context.persistence === 'resumable' ? 'paused' : 'stopped'),
      hasSandbox: ({ context }) => context.persistence === 'resumable',
    }),
    machineStopped: assign({ machineState: () => 'stopped' as const, hasSandbox: false, turnActive: false }),
  },
}).createMachine({
  id: 'session',
  initial: 'queued',
  context: ({ input }) => ({
    ...input,
    machineState: null,
    error: null,
    hasSandbox: false,
    turnActive: false,
    queued: 0,
    restStatus: null,
  }),
  // What no state allows: the refusals the spec names. States override these.
  on: {
    cancel: { actions: [finished] },
    message: { actions: [terminal] },
    pause: { actions: [noSandboxToPause] },
    resume: { actions: [notPaused] },
    stop_turn: { actions: [noTurn] },
    fork: { actions: [notForkable('this one is not (it has not finished a turn, runs one, or is closed)')] },
  },
  states: {
    queued: {
      description: 'Accepted; waiting for a slot under the org plan’s concurrent runs and the host’s capacity.',
      on: {
        admit: [
          // A follow-up that waited for a slot goes straight to its parked sandbox.
          {
            guard: 'parkedWithinConcurrency',
            target: 'running',
            actions: ['machineResuming', 'wakeSandbox', 'dequeueMessage', 'countDequeued', 'beginTurn', 'startTurn'],
          },
          { guard: 'withinConcurrency', target: 'allocating' },
        ],
        cancel: cancelLive,
        message: { actions: [notStarted] },
      },
    },
    allocating: {
      description: 'The sandbox is starting.',
      entry: ['machinePreparing', 'provisionSandbox'],
      on: {
        'sandbox.ready': { target: 'running', actions: ['sandboxUp', 'machineRunning', 'beginTurn', 'startTurn'] },
        'sandbox.failed': { target: 'failed', actions: ['recordError', 'machineStopped', 'destroySandbox', 'admitQueued'] },
        cancel: cancelLive,
        message: { actions: [notStarted] },
        'service.restarted': { target: 'failed', actions: ['recordRestart', 'machineStopped', 'destroySandbox', 'admitQueued'] },
      },
    },
    running: {
      description: 'A turn is in progress.',
      on: {
        'turn.ended': [
          // Queued follow-ups are delivered next, on the same sandbox, before anything else.
          {
            guard: 'hasQueued',
            target: 'running',
            reenter: true,
            actions: ['endTurn', 'clearError', 'dequeueMessage', 'countDequeued', 'beginTurn', 'startTurn'],
          },
          { guard: 'turnFailed', target: 'failed', actions: ['recordError', 'restFailed', ...turnOver] },
          { guard: 'answerUnproven', target: 'needs_review', actions: ['clearError', 'restNeedsReview', ...turnOver] },
          { guard: 'isInteractive', target: 'input_required', actions: ['clearError', 'restInputRequired', ...turnOver] },
          { target: 'completed', actions: ['clearError', 'restCompleted', ...turnOver] },
        ],
        message: [
          {
            guard: 'isEphemeral',
            actions: [refuse('conflict', 'An ephemeral session takes no message while its turn runs', 'PERSISTENCE_MODE_CONFLICT')],
          },
          { guard: 'queueFull', actions: [refuse('rate_limited', 'The session already has 20 queued messages', 'QUEUE_FULL')] },
          { actions: ['enqueueMessage', 'countQueued'] },
        ],
        pause: [
          { guard: 'isEphemeral', actions: [refuse('conflict', 'An ephemeral session cannot be paused')] },
          { target: 'paused', actions: ['machinePausing', 'parkSandbox', 'admitQueued'] },
        ],
        stop_turn: { actions: ['stopTurn'] },
        'sandbox.woken': { actions: ['machineRunning'] },
        cancel: cancelLive,
        'sandbox.failed': {
          target: 'failed',
          actions: ['recordError', 'killTurn', 'machineStopped', 'destroySandbox', 'dropQueue', 'clearQueue', 'admitQueued'],
        },
        // The CLI process died with the server, the sandbox's disk did not: a resumable session
        // goes on with its queued follow-ups, or rests failed and takes new ones.
        'service.restarted': [
          { guard: 'isEphemeral', target: 'failed', actions: ['recordRestart', 'machineStopped', 'destroySandbox', 'admitQueued'] },
          {
            guard: 'hasQueued',
            target: 'running',
            reenter: true,
            actions: ['endTurn', 'dequeueMessage', 'countDequeued', 'beginTurn', 'startTurn'],
          },
          { target: 'failed', actions: ['recordRestart', 'restFailed', ...turnOver] },
        ],
      },
    },
    paused: {
      description: 'Parked by the caller, mid-turn or between turns; disk and memory kept.',
      on: {
        'sandbox.parked': { actions: ['machineParked'] },
        resume: [
          { guard: 'midTurnOverConcurrency', actions: [overLimit] },
          { guard: 'turnActive', target: 'running', actions: ['machineResuming', 'wakeSandbox'] },
          // Between turns nothing wakes: the session rests where its last turn ended.
          { guard: 'restsInNeedsReview', target: 'needs_review' },
          { guard: 'restsInFailed', target: 'failed' },
          { guard: 'restsInInputRequired', target: 'input_required' },
          { target: 'completed' },
        ],
        message: [
          // Mid-turn the message waits for the turn; between turns it starts one, given a slot.
          { guard: 'midTurnOverConcurrency', actions: ['enqueueMessage', 'countQueued'] },
          { guard: 'turnActive', target: 'running', actions: ['machineResuming', 'wakeSandbox', 'enqueueMessage', 'countQueued'] },
          { guard: 'overConcurrency', target: 'queued', actions: ['enqueueMessage', 'countQueued'] },
          { target: 'running', actions: [...deliverNow] },
        ],
        // The turn finished just as it was being parked: it rests where it would have ended.
        'turn.ended': [
          { guard: 'turnFailed', actions: ['recordError', 'endTurn', 'restFailed'] },
          { guard: 'answerUnproven', actions: ['endTurn', 'restNeedsReview'] },
          { guard: 'isInteractive', actions: ['endTurn', 'restInputRequired'] },
          { actions: ['endTurn', 'restCompleted'] },
        ],
        pause: { actions: [refuse('conflict', 'The session is already paused')] },
        fork: [{ guard: 'turnActive', actions: [notForkable('this one is paused mid-turn')] }, ...forkParked],
        stop_turn: { actions: [refuse('conflict', 'The session is paused; resume it before stopping its turn', 'NO_ACTIVE_TURN')] },
        cancel: cancelLive,
        'idle.timeout': { target: 'expired', actions: ['machineStopped', 'killTurn', 'destroySandbox', 'dropQueue', 'clearQueue'] },
        // A driver that cannot keep processes across a restart lost the paused turn; it rests failed.
        'service.restarted': { guard: 'turnActive', actions: ['recordRestart', 'endTurn', 'restFailed'] },
      },
    },
    input_required: { description: 'An interactive turn ended normally; waiting for a follow-up.', on: betweenTurns },
    needs_review: { description: 'The turn ended without the structured answer its output_schema asked for.', on: betweenTurns },
    completed: { description: 'The turn ended with an answer.', on: betweenTurns },
    failed: {
      description: 'A harness, model or sandbox error ended the turn; `error` says which.',
      on: {
        ...betweenTurns,
        // Only here can a resumable session have lost its sandbox (it never started, or a wake failed).
        message: [
          followUp[0],
          {
            guard: 'noSandbox',
            actions: [refuse('conflict', 'This run cannot be continued: its sandbox is gone', 'CONTINUATION_UNSUPPORTED')],
          },
          ...followUp.slice(1),
        ],
      },
    },
    cancelled: {
      description: 'Cancelled by the caller; the sandbox is gone.',
      type: 'final',
    },
    expired: {
      description: 'Parked past the idle limit; sandbox and checkpoint deleted.',
      type: 'final',
    },
  },
})

export type SessionSnapshot = SnapshotFrom<typeof sessionMachine>

/** The status column, derived from the snapshot and nothing else. */
export function statusOf(snapshot: SessionSnapshot): SessionStatus {
  const value = snapshot.value
  switch (value) {
    case 'queued':
    case 'allocating':
    case 'running':
    case 'paused':
    case 'input_required':
    case 'needs_review':
    case 'completed':
    case 'failed':
    case 'cancelled':
    case 'expired':
      return value
    default: {
      const never: never = value
      throw new Error(`unknown session state ${String(never)}`)
    }
  }
}

/** The refusal among a transition's actions, if the machine refused the event. */
export function refusalOf(actions: readonly { type: string; params?: unknown }[]): Refusal | null {
  const refusal = actions.find((a) => a.type === 'refuse')
  return refusal ? (refusal.params as Refusal) : null
}
