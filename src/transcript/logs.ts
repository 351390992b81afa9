import { LOG_CAP_BYTES } from '../session-record/event-log'
import type { SessionLookup } from '../session-record/ports'
import type { SessionRow, SessionStore } from '../session-record/store'
import type { LokiLine, LokiLogs } from './loki'

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
  return capped(parts.join(''), truncatedAtWrite, row, 'stored')
}

/**
 * The same log with its lines read from Loki: the stored status lines and Loki's lines, in time
 * order (a status line first when both have one millisecond).
 */
export function lokiSessionLogs(store: SessionStore, row: SessionRow, lines: LokiLine[], more: boolean) {
  const events = store.allEvents(row.id)
  // Loki has none of a log the store has (failed pushes, retention): the stored log answers. (A
  // count of lines cannot decide it: lines still on their way make Loki's a little shorter.)
  if (lines.length === 0 && events.some((e) => e.kind === 'log' && typeof e.data.text === 'string')) return null
  const truncatedAtWrite = events.some((e) => e.kind === 'log' && e.data.truncated === true)
  const status = events
    .filter((event) => event.kind === 'status')
    .map((event) => ({
      at: event.createdAt,
      line: `${new Date(event.createdAt).toISOString()} agentd: status ${String(event.data.status)}`,
      order: 0,
    }))
  const merged = [...status, ...lines.map((l) => ({ ...l, order: 1 }))].sort((a, b) => a.at - b.at || a.order - b.order)
  return capped(merged.map((l) => `${l.line}\n`).join(''), more || truncatedAtWrite, row, 'loki')
}

function capped(text: string, truncatedAtWrite: boolean, row: SessionRow, source: 'stored' | 'loki') {
  let logs = text
  let truncated = truncatedAtWrite
  const bytes = new TextEncoder().encode(logs)
  if (bytes.length > LOG_CAP_BYTES) {
    truncated = true
    logs = new TextDecoder().decode(bytes.slice(bytes.length - LOG_CAP_BYTES)).replace(/^[^\n]*\n/, '')
  }
  if (!logs) logs = `status: ${row.status}\n`
  return { logs, source, status: row.status, truncated }
}

/** GET …/logs (spec 4.2): a session's runtime log, from Loki when it is configured and answers, else as stored. */
export class SessionLogReader {
  constructor(
    private readonly deps: {
      sessions: SessionLookup
      store: SessionStore
      /** AGENTD_LOKI_URL's client, when set: logs are read from there. */
      loki?: LokiLogs | null
      now: () => number
    },
  ) {}

  /** Loki's lines for the run's window when it answers, else the stored log. */
  async logs(access: { orgId: string }, projectRef: string, id: string) {
    const { sessions, store, loki, now } = this.deps
    const row = sessions.find(access, projectRef, id)
    const found = loki ? await loki.query(row.id, row.createdAt - 60_000, now() + 60_000) : null
    return (found && lokiSessionLogs(store, row, found.lines, found.more)) ?? sessionLogs(store, row)
  }
}
