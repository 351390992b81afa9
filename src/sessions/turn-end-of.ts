import { transition } from 'xstate'
import { sessionMachine, statusOf, type SessionMachineEvent } from '../../machines/session.machine'
import { statusIn, type SessionStatus } from '../domain/status'

type MachineState = ReturnType<typeof sessionMachine.resolveState>

/**
 * What a transition says of a turn: whether one ended (the webhook outbox and the meter hear of it,
 * in the transition's transaction), and how. A turn ended when the CLI's turn did, when a run that
 * never got to one failed or was cancelled, and when a restart found one cut off, even if the
 * session moves straight on to a queued follow-up or stays paused: that turn ended failed. A queued
 * follow-up that starts at once leaves the ended turn reported where it would have rested, as the
 * machine says for the same event without a queue.
 */
export function turnEndOf(
  current: MachineState,
  event: SessionMachineEvent,
  from: SessionStatus,
  to: SessionStatus,
): { ended: boolean; as: SessionStatus } {
  const lostTurn = event.type === 'service.restarted' && current.context.turnActive
  const ended =
    event.type === 'turn.ended' || lostTurn || (to !== from && (to === 'failed' || to === 'cancelled') && statusIn('inFlight', from))
  if (lostTurn) return { ended, as: 'failed' }
  if (event.type === 'turn.ended' && to === 'running') {
    const unqueued = sessionMachine.resolveState({ value: current.value, context: { ...current.context, queued: 0 } })
    return { ended, as: statusOf(transition(sessionMachine, unqueued, event)[0]) }
  }
  return { ended, as: to }
}
