import type { SessionMachineEvent } from '../../machines/session.machine'
import type { SessionStatus } from '../domain/status'
import type { SessionPatch, SessionRow } from './store'

/**
 * The session actor's inbox: how what runs below it (the runtime's sandboxes and turns) reports
 * back. Events go through the session's machine; nothing below the actor writes a status itself.
 */
export interface SessionInbox {
  /** Feeds one event to the session's machine; false (nothing changed) when it does not take it now. */
  apply(id: string, event: SessionMachineEvent, patch?: SessionPatch): boolean
  /** Starts queued sessions while the host has room. */
  admit(): void
}

/** A turn's end (or a run's that never got to one), as the transition that ended it saw it. */
export interface StatusChange {
  row: SessionRow
  from: SessionStatus
  to: SessionStatus
  patch: SessionPatch
}

/**
 * Told inside the transaction that ends a turn, so what it writes (a webhook's outbox row) commits
 * or rolls back with the transition. Webhooks implement it.
 */
export interface TurnEndedPort {
  turnEnded(change: StatusChange): void
}

/**
 * A session the caller may read: found by id under the route's org and Project reference, else
 * 404. The sessions' read side implements it; the views above sessions (transcript, tool calls,
 * a pull request's changes) find their session through it.
 */
export interface SessionLookup {
  find(access: { orgId: string }, projectRef: string, id: string): SessionRow
}
