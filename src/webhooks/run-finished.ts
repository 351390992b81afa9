import type { SessionStatus } from '../domain/status'
import { answerOf } from '../session-record/answer'
import type { SessionRow } from '../session-record/store'

// What a `runFinished` webhook says (spec 6.2). Built once, when the turn's transaction writes the
// outbox row, and frozen there: a retry sends the same bytes, so the signature covers what was true
// at the turn's end, not what the session says by the time the receiver answers.

/** A result whose JSON is larger is sent as null; the receiver reads `result_url` (spec 8). */
export const INLINE_RESULT_BYTES = 16 * 1024

const TYPE_OF: Partial<Record<SessionStatus, { type: string; status: string }>> = {
  completed: { type: 'run.completed', status: 'completed' },
  needs_review: { type: 'run.completed', status: 'needs_review' },
  // The turn ended normally; the interactive session now waits for a follow-up. The body's status
  // stays within the spec's four values.
  input_required: { type: 'run.completed', status: 'completed' },
  failed: { type: 'run.failed', status: 'failed' },
  cancelled: { type: 'run.cancelled', status: 'cancelled' },
}

/**
 * How a turn ended, for the webhook: the session's new status, or, when the session moved straight
 * on (a queued follow-up started, or it is parked), what the committed row says of the turn.
 */
function turnStatus(row: SessionRow, to: SessionStatus): SessionStatus {
  if (TYPE_OF[to]) return to
  if (row.error) return 'failed'
  if (row.outputSchema && row.schemaValid !== true) return 'needs_review'
  return 'completed'
}

/** The `runFinished` body (spec 6.2) for a session row as committed at the end of its turn. */
export function runFinishedBody(row: SessionRow, to: SessionStatus, orgSlug: string, publicUrl: string, endedAt: number) {
  const mapped = TYPE_OF[turnStatus(row, to)]!
  const base = `${publicUrl}/o/${encodeURIComponent(orgSlug)}/p/${row.projectId ?? '_'}/sessions/${row.id}`
  const result = answerOf(row)
  const inline = result !== null && Buffer.byteLength(JSON.stringify(result)) <= INLINE_RESULT_BYTES ? result : null
  return {
    type: mapped.type,
    timestamp: new Date(endedAt).toISOString(),
    data: {
      run_id: row.id,
      project_id: row.projectId,
      status: mapped.status,
      result: inline,
      total_cost_usd: row.totalCostUsd,
      result_url: `${base}/result`,
      events_url: `${base}/events`,
      artifacts_url: `${base}/artifacts`,
      // Beyond spec 6.2's fields: what the turn pushed to its repository (issue 18), null otherwise.
      branch: row.branch,
      pr_url: row.prUrl,
    },
  }
}
