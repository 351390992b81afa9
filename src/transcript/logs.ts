import type { SessionRow, SessionStore } from '../sessions/store'

/** Stored log text per session is capped; the oldest lines go first. */
export const LOG_CAP_BYTES = 1024 * 1024

/**
 * The runtime log of a session (spec 4.2): agentd's own lines (status changes) and the harness's
 * stderr, in order, with the run's status line when nothing else was logged.
 */
export function sessionLogs(store: SessionStore, row: SessionRow) {
  const parts: string[] = []
  let truncatedAtWrite = false
  for (const event of store.allEvents(row.id)) {
    const time = new Date(event.createdAt).toISOString()
    if (event.kind === 'status') parts.push(`${time} agentd: status ${String(event.data.status)}\n`)
    else if (event.kind === 'log') {
      if (event.data.truncated) truncatedAtWrite = true
      else parts.push(String(event.data.text ?? ''))
    }
  }
  let logs = parts.join('')
  let truncated = truncatedAtWrite
  const bytes = new TextEncoder().encode(logs)
  if (bytes.length > LOG_CAP_BYTES) {
    truncated = true
    logs = new TextDecoder().decode(bytes.slice(bytes.length - LOG_CAP_BYTES)).replace(/^[^\n]*\n/, '')
  }
  if (!logs) logs = `status: ${row.status}\n`
  return { logs, source: 'stored' as const, status: row.status, truncated }
}
