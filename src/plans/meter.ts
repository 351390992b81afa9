import type { Db } from '../db/client'
import { usageRecords } from '../db/schema'
import type { SessionStatus } from '../domain/status'
import type { SessionPatch, SessionRow } from '../sessions/store'

/**
 * Metering of one session transition (contract section 9), written in the transition's own
 * transaction. Compute is sandbox running time: a stretch starts when the session enters `running`
 * and ends when it leaves it (a pause, the turn's end) or a turn ends while the next starts at once
 * (a queued follow-up); parked and paused time is free. A turn's tokens and spend are what its
 * patch adds to the session's totals, unless the session runs on the caller's own provider account
 * (those are the caller's, billed by the provider). Pure: the service stores the answer with the transition.
 */
export function meterTransition(change: {
  row: SessionRow
  from: SessionStatus
  to: SessionStatus
  turnEnded: boolean
  restarted: boolean
  patch: SessionPatch
  now: number
}): { fields: Pick<SessionPatch, 'runningSince'>; usage: UsageRecord | null } {
  const { row, from, to, turnEnded, patch, now } = change
  const stretchEnds = from === 'running' && row.runningSince !== null && (to !== 'running' || turnEnded || change.restarted)
  // A turn a restart found lost ran for an unknown part of the downtime: none of it is billed.
  const computeMs = stretchEnds && !change.restarted ? Math.max(0, now - row.runningSince!) : 0
  const metered = row.accountId === null
  const tokens = !metered || patch.totalTokens === undefined ? 0 : (patch.totalTokens ?? 0) - (row.totalTokens ?? 0)
  const spendUsd = !metered || patch.totalCostUsd === undefined ? 0 : (patch.totalCostUsd ?? 0) - (row.totalCostUsd ?? 0)
  const usage = computeMs > 0 || tokens > 0 || spendUsd > 0 ? { orgId: row.orgId, sessionId: row.id, at: now, tokens: Math.max(0, tokens), spendUsd: Math.max(0, spendUsd), computeMs } : null
  // A restart that starts a queued follow-up at once begins a new stretch: the old one's end is unknown.
  if (to === 'running' && (from !== 'running' || turnEnded || change.restarted)) return { fields: { runningSince: now }, usage }
  if (to !== 'running' && row.runningSince !== null) return { fields: { runningSince: null }, usage }
  return { fields: {}, usage }
}

export type UsageRecord = typeof usageRecords.$inferInsert

/** The tokens and spend of a turn whose end the machine no longer takes (its session was cancelled, failed or expired first): a ledger row of their own. */
export function billLateTurn(db: Db, row: SessionRow | null, patch: SessionPatch, now: number): void {
  if (row) recordUsage(db, meterTransition({ row, from: row.status, to: row.status, turnEnded: false, restarted: false, patch, now }).usage)
}

/** Stores what `meterTransition` measured; inside the transition's transaction. */
export function recordUsage(db: Db, usage: UsageRecord | null): void {
  if (usage) db.insert(usageRecords).values(usage).run()
}
