import type { Db } from '../db/client'
import { usageRecords } from '../db/schema'
import type { SessionStatus } from '../domain/status'
import type { SessionPatch, SessionRow } from '../session-record/store'
import { isoWeekStart } from './periods'

/**
 * Metering of one session transition (contract section 9), written in the transition's own
 * transaction. Compute is sandbox running time: a stretch starts when the session enters `running`
 * and ends when it leaves it (a pause, the turn's end) or a turn ends while the next starts at once
 * (a queued follow-up); parked and paused time is free. A turn's tokens and spend are what its
 * patch adds to the session's totals, unless the session runs on the caller's own provider account
 * (those are the caller's, billed by the provider). A stretch that crosses the start of a month or
 * an ISO week is cut there, each piece counted in its own periods. Pure: the service stores the
 * answer with the transition.
 */
export function meterTransition(change: {
  row: SessionRow
  from: SessionStatus
  to: SessionStatus
  turnEnded: boolean
  restarted: boolean
  patch: SessionPatch
  now: number
}): { fields: Pick<SessionPatch, 'runningSince'>; usage: UsageRecord[] } {
  const { row, from, to, turnEnded, patch, now } = change
  const stretchEnds = from === 'running' && row.runningSince !== null && (to !== 'running' || turnEnded || change.restarted)
  // A turn a restart found lost ran for an unknown part of the downtime: none of it is billed.
  const billedFrom = stretchEnds && !change.restarted ? Math.min(row.runningSince!, now) : now
  const metered = row.accountId === null
  const tokens = !metered || patch.totalTokens === undefined ? 0 : (patch.totalTokens ?? 0) - (row.totalTokens ?? 0)
  const spendUsd = !metered || patch.totalCostUsd === undefined ? 0 : (patch.totalCostUsd ?? 0) - (row.totalCostUsd ?? 0)
  const base = { orgId: row.orgId, sessionId: row.id }
  // Every piece but the last ends just before a period's start, so it counts in the period before.
  const cuts = periodStartsWithin(billedFrom, now)
  const usage: UsageRecord[] = [billedFrom, ...cuts]
    .slice(0, -1)
    .map((from, i) => ({ ...base, at: cuts[i]! - 1, tokens: 0, spendUsd: 0, computeMs: cuts[i]! - from }))
  const lastMs = now - (cuts.at(-1) ?? billedFrom)
  if (lastMs > 0 || tokens > 0 || spendUsd > 0)
    usage.push({ ...base, at: now, tokens: Math.max(0, tokens), spendUsd: Math.max(0, spendUsd), computeMs: lastMs })
  // A restart that starts a queued follow-up at once begins a new stretch: the old one's end is unknown.
  if (to === 'running' && (from !== 'running' || turnEnded || change.restarted)) return { fields: { runningSince: now }, usage }
  if (to !== 'running' && row.runningSince !== null) return { fields: { runningSince: null }, usage }
  return { fields: {}, usage }
}

export type UsageRecord = typeof usageRecords.$inferInsert

/** The starts of months and ISO weeks (UTC) strictly inside (from, to), in order. */
function periodStartsWithin(from: number, to: number): number[] {
  const starts: number[] = []
  for (let at = from; ; ) {
    const d = new Date(at)
    const next = Math.min(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1), isoWeekStart(at) + 7 * 24 * 3600 * 1000)
    if (next >= to) return starts
    starts.push(next)
    at = next
  }
}

/**
 * The tokens and spend of a turn whose end the machine no longer takes (its session was cancelled,
 * failed or expired first): a ledger row of their own.
 */
export function billLateTurn(db: Db, row: SessionRow | null, patch: SessionPatch, now: number): void {
  if (row) recordUsage(db, meterTransition({ row, from: row.status, to: row.status, turnEnded: false, restarted: false, patch, now }).usage)
}

/** Stores what `meterTransition` measured; inside the transition's transaction. */
export function recordUsage(db: Db, usage: UsageRecord[]): void {
  if (usage.length > 0) db.insert(usageRecords).values(usage).run()
}
