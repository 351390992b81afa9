import { assign, setup, type SnapshotFrom } from 'xstate'
import type { MachineState, PersistenceMode, RunMode, SessionStatus } from '../src/domain/status'

/**
 * The session lifecycle: one state per SessionStatus (spec section 3, contract section 5).
 * The machine holds every lifecycle rule; the service only feeds it events and carries out the
 * named actions it returns, after the new snapshot is committed.
 */

export interface SessionContext {
  persistence: PersistenceMode
  mode: RunMode
  hasSchema: boolean
  machineState: MachineState | null
  error: string | null
}

export type SessionInput = Pick<SessionContext, 'persistence' | 'mode' | 'hasSchema'>

export type SessionMachineEvent =
  | { type: 'admit'; activeRuns: number; limit: number | null }
  | { type: 'sandbox.ready' }
  | { type: 'sandbox.failed'; error: string }
  | { type: 'turn.ended'; error: string | null; schemaValid: boolean | null }
  | { type: 'cancel' }
  | { type: 'service.restarted' }

/** Bump on any change that makes stored snapshots unreadable by the new definition. */
export const SESSION_MACHINE_VERSION = 1

// Every normal end of a turn: the sandbox is parked (resumable) or destroyed (ephemeral).
const turnOver = [
  'machineTurnOver',
  { type: 'releaseSandbox', params: ({ context }: { context: SessionContext }) => ({ keep: context.persistence === 'resumable' }) },
  'admitQueued',
] as const

const RESTARTED = 'agentd restarted while this turn was running; the turn was lost'

export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    events: {} as SessionMachineEvent,
    input: {} as SessionInput,
  },
  guards: {
    withinConcurrency: ({ event }) =>
      event.type === 'admit' && (event.limit === null || event.activeRuns < event.limit),
    turnFailed: ({ event }) => event.type === 'turn.ended' && event.error !== null,
    answerUnproven: ({ context, event }) =>
      context.hasSchema && event.type === 'turn.ended' && event.schemaValid !== true,
    isInteractive: ({ context }) => context.mode === 'interactive',
  },
  actions: {
    // Effects carried out by the session service after the transition is committed.
    provisionSandbox: () => {},
    startTurn: () => {},
    killTurn: () => {},
    // keep: park the sandbox for follow-ups (resumable) instead of destroying it (ephemeral).
    releaseSandbox: (_, _params: { keep: boolean }) => {},
    destroySandbox: () => {},
    admitQueued: () => {},
    recordError: assign({
      error: ({ event }) =>
        event.type === 'sandbox.failed' || event.type === 'turn.ended' ? event.error : null,
    }),
    recordRestart: assign({ error: () => RESTARTED }),
    machinePreparing: assign({ machineState: () => 'preparing' as const }),
    machineRunning: assign({ machineState: () => 'running' as const }),
    // A resumable sandbox is kept (parked) for follow-ups; an ephemeral one is gone.
    machineTurnOver: assign({
      machineState: ({ context }) => (context.persistence === 'resumable' ? 'paused' : 'stopped'),
    }),
    machineStopped: assign({ machineState: () => 'stopped' as const }),
  },
}).createMachine({
  id: 'session',
  initial: 'queued',
  context: ({ input }) => ({ ...input, machineState: null, error: null }),
  on: {
    // Ending states refuse cancel by not handling it (409 "already finished").
  },
  states: {
    queued: {
      description: 'Accepted; waiting for a slot under the org plan’s concurrent runs.',
      on: {
        admit: { guard: 'withinConcurrency', target: 'allocating' },
        cancel: { target: 'cancelled', actions: ['machineStopped', 'admitQueued'] },
        'service.restarted': { target: 'queued' },
      },
    },
    allocating: {
      description: 'The sandbox is starting.',
      entry: ['machinePreparing', 'provisionSandbox'],
      on: {
        'sandbox.ready': { target: 'running' },
        'sandbox.failed': { target: 'failed', actions: ['recordError', 'machineStopped', 'destroySandbox', 'admitQueued'] },
        cancel: { target: 'cancelled', actions: ['machineStopped', 'destroySandbox', 'admitQueued'] },
        'service.restarted': { target: 'failed', actions: ['recordRestart', 'machineStopped', 'destroySandbox', 'admitQueued'] },
      },
    },
    running: {
      description: 'A turn is in progress.',
      entry: ['machineRunning', 'startTurn'],
      on: {
        'turn.ended': [
          { guard: 'turnFailed', target: 'failed', actions: ['recordError', ...turnOver] },
          { guard: 'answerUnproven', target: 'needs_review', actions: [...turnOver] },
          { guard: 'isInteractive', target: 'input_required', actions: [...turnOver] },
          { target: 'completed', actions: [...turnOver] },
        ],
        cancel: { target: 'cancelled', actions: ['killTurn', 'machineStopped', 'destroySandbox', 'admitQueued'] },
        'service.restarted': { target: 'failed', actions: ['recordRestart', 'machineStopped', 'destroySandbox', 'admitQueued'] },
      },
    },
    paused: {
      description: 'A resumable session parked between turns.',
      on: {
        cancel: { target: 'cancelled', actions: ['machineStopped', 'destroySandbox'] },
      },
    },
    input_required: {
      description: 'An interactive turn ended normally; waiting for a follow-up.',
      on: {
        cancel: { target: 'cancelled', actions: ['machineStopped', 'destroySandbox'] },
      },
    },
    needs_review: {
      description: 'The turn ended without the structured answer its output_schema asked for.',
    },
    completed: {
      description: 'The turn ended with an answer.',
    },
    failed: {
      description: 'A harness, model or sandbox error ended the turn; `error` says which.',
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
