import type { SessionRow } from './store'

// What a session answered and how it ended, read from its row alone: the API's views, the event
// stream's last frame and the webhook body all say it the same way.

/** The SessionAnswer of the last finished turn, or null before one finished (spec 2.6). */
export function answerOf(row: SessionRow) {
  if (!row.hasResult) return null
  return {
    text: row.resultText,
    structured: row.resultStructured ?? null,
    schema_valid: row.outputSchema ? (row.schemaValid ?? false) : null,
  }
}

/** One line saying how the run ended (contract section 5), or where it stands. */
export function outputLine(row: SessionRow): string | null {
  if (row.error && (row.status === 'failed' || row.status === 'cancelled' || row.status === 'expired')) {
    return row.error.split('\n', 1)[0]!.slice(0, 50_000)
  }
  const turns = `${row.turnsCount} turn${row.turnsCount === 1 ? '' : 's'}`
  switch (row.status) {
    case 'completed':
    case 'needs_review':
    case 'input_required':
    case 'failed':
      return `${row.status.replace('_', ' ')} in ${turns}`
    case 'cancelled':
    case 'expired':
      return `${row.status} after ${turns}`
    default:
      return null
  }
}
