import { STATUS_GROUPS, type SessionStatus } from '../src/domain/status.ts'

const isIn = (group: keyof typeof STATUS_GROUPS, status: string) => (STATUS_GROUPS[group] as readonly string[]).includes(status)

/** Statuses after which a session takes nothing more. */
const CLOSED = ['cancelled', 'expired']

/**
 * Which lifecycle controls a session offers (spec section 3), from the server's own status groups.
 * The server decides: a control offered here can still be refused (409), and the console says why.
 */
export function controls(session: { status: string; persistence?: string | null }) {
  const { status } = session
  const resumable = session.persistence !== 'ephemeral'
  return {
    pause: resumable && status !== 'paused' && status !== 'queued' && !CLOSED.includes(status),
    resume: status === 'paused',
    stopTurn: isIn('active', status),
    // The machine cancels a session only before its turn ended (spec 3: "not yet finished").
    cancel: isIn('inFlight', status),
    followUp: !CLOSED.includes(status) && (resumable || !isIn('inProgress', status)),
    // A resumable session parked between turns (one paused mid-turn is refused, 409, and the console says why).
    fork: resumable && isIn('parkable', status),
  }
}

/** Still moving: worth asking again soon. */
export const moving = (status: string) => isIn('inFlight', status)

export type { SessionStatus }
