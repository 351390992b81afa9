import { ApiError, notFound } from '../domain/errors'
import type { AuthService } from '../identity/auth'
import type { Principal } from '../identity/service'
import type { SessionStore } from '../session-record/store'

import { readChart } from './chart-file'

export interface HistoryStep {
  at: string
  from: string | null
  to: string
  turn: number
}

/**
 * The lifecycle chart as an HTML page: the drawing `bun run chart` made of the session machine
 * (src/statechart/chart.svg), and for one session its current state highlighted and its
 * transitions as persisted. No script: the page is finished when it arrives.
 */
export class StatechartService {
  private readonly chart = readChart().svg

  constructor(
    private readonly auth: AuthService,
    private readonly store: SessionStore,
  ) {}

  /** The page; with `sessionId`, that session must be in one of the caller's orgs (404 otherwise). */
  page(principal: Principal, sessionId?: string): string {
    if (sessionId === undefined) return renderPage(this.chart, null)
    const row = this.store.get(sessionId)
    if (!row) throw notFound('Session not found')
    try {
      this.auth.access(principal, row.orgId)
    } catch (err) {
      if (err instanceof ApiError && err.kind === 'not_found') throw notFound('Session not found')
      throw err
    }
    return renderPage(highlighted(this.chart, row.status), {
      id: row.id,
      status: row.status,
      machineState: row.machineState,
      history: this.history(row.id),
    })
  }

  /** Status changes from the session's persisted `status` events, oldest first. */
  history(sessionId: string): HistoryStep[] {
    const changes: HistoryStep[] = []
    let from: string | null = null
    for (const event of this.store.allEvents(sessionId)) {
      if (event.kind !== 'status') continue
      const to = String(event.data.status)
      changes.push({ at: new Date(event.createdAt).toISOString(), from, to, turn: event.turn })
      from = to
    }
    return changes
  }
}

interface SessionPart {
  id: string
  status: string
  machineState: string | null
  history: HistoryStep[]
}

const escapeHtml = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;')

function renderSession(session: SessionPart): string {
  const rows = session.history
    .map(
      (c) =>
        `<tr><td><time datetime="${c.at}">${c.at}</time></td>` +
        `<td>${c.from ? escapeHtml(c.from) : '—'}</td><td>${escapeHtml(c.to)}</td><td>${c.turn}</td></tr>`,
    )
    .join('\n')
  const machineState = escapeHtml(session.machineState ?? 'none')
  return `<section id="session" data-status="${escapeHtml(session.status)}">
<h2>Session <code>${escapeHtml(session.id)}</code></h2>
<p>Current state: <strong>${escapeHtml(session.status)}</strong> (machine_state ${machineState}), highlighted below.</p>
<h3>Transitions</h3>
<table id="history"><thead><tr><th>At</th><th>From</th><th>To</th><th>Turn</th></tr></thead>
<tbody>
${rows}
</tbody></table>
</section>`
}

/** The drawing with the node of `state` marked `current` (its id is `lifecycle-state-<state>-<n>`). */
function highlighted(svg: string, state: string): string {
  return svg.replace(
    new RegExp(`<g class="([^"]*)" id="lifecycle-state-${state}-(\\d+)"`),
    (_, classes: string, n: string) => `<g class="${classes} current" id="lifecycle-state-${state}-${n}"`,
  )
}

function renderPage(chart: string, session: SessionPart | null): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Session lifecycle · agentd</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem; color: #212121; }
table { border-collapse: collapse; margin-top: .5rem; }
td, th { border: 1px solid #cfd8dc; padding: .25rem .6rem; text-align: left; font-size: .9rem; }
#chart svg { max-width: 100%; height: auto; }
#chart g.node.current > rect { fill: #ffe082 !important; stroke: #e65100 !important; stroke-width: 3px !important; }
</style>
</head>
<body data-rendered="true">
<h1>Session lifecycle</h1>
<p>Generated from <code>machines/session.machine.ts</code>; the transition table is in <code>docs/lifecycle.md</code>.</p>
${session ? renderSession(session) : ''}
<div id="chart">
${chart}
</div>
</body>
</html>
`
}
