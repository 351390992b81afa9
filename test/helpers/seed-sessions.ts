import type { Database } from 'bun:sqlite'
import { randomUUID } from 'node:crypto'

/** A harness event as SessionRuntime stores it in `session_events.data` (spec 2.8), minus agent and timestamp. */
export interface SeedEvent {
  type: string
  role?: 'user' | 'assistant'
  content?: string
  [field: string]: unknown
}

/** A session row to seed; unset fields get what a fresh finished headless run would have. */
export interface SeedSession {
  id?: string
  orgId: string
  projectId?: string | null
  startedByUserId?: string | null
  prompt: string
  /** Defaults to the first line of the prompt, at most 80 characters (as the service sets it). */
  title?: string
  agent?: string
  harness?: string
  model?: string
  mode?: 'headless' | 'interactive'
  status?: string
  repoOwner?: string | null
  repoName?: string | null
  branch?: string | null
  summary?: string | null
  error?: string | null
  sessionCapture?: 'complete' | 'partial' | 'failed' | null
  inputTokens?: number | null
  outputTokens?: number | null
  totalCostUsd?: number | null
  toolCallsCount?: number | null
  createdAt: number
  completedAt?: number | null
  /** Turn 1's normalized harness events, stored after the lifecycle's `status` events. */
  events?: SeedEvent[]
}

const SESSION_COLUMNS = [
  'id',
  'org_id',
  'project_id',
  'started_by_user_id',
  'agent',
  'harness',
  'harness_version_requested',
  'harness_version_resolved',
  'status',
  'mode',
  'persistence_mode',
  'machine_state',
  'prompt',
  'title',
  'repo_owner',
  'repo_name',
  'branch',
  'summary',
  'error',
  'model',
  'input_tokens',
  'output_tokens',
  'total_tokens',
  'total_cost_usd',
  'tool_calls_count',
  'turns_count',
  'session_capture',
  'effective_config',
  'has_result',
  'completed_at',
  'created_at',
  'updated_at',
]
const EVENT_COLUMNS = ['session_id', 'seq', 'turn', 'kind', 'type', 'data', 'created_at']

const LIFECYCLE = ['queued', 'allocating', 'running']

/** Rows per multi-row INSERT: the service also writes a batch of events as one statement. */
const CHUNK = { sessions: 50, events: 250 }

type Statement = ReturnType<Database['prepare']>
const statements = new WeakMap<Database, Map<string, Statement>>()

/** `INSERT INTO table (columns) VALUES (?, …), …` for `rows` rows, prepared once per connection. */
function insertStatement(sqlite: Database, table: string, columns: string[], rows: number): Statement {
  let cache = statements.get(sqlite)
  if (!cache) statements.set(sqlite, (cache = new Map()))
  const key = `${table}:${rows}`
  let statement = cache.get(key)
  if (!statement) {
    const tuple = `(${columns.map(() => '?').join(', ')})`
    statement = sqlite.prepare(`INSERT INTO ${table} (${columns.join(', ')}) VALUES ${Array(rows).fill(tuple).join(', ')}`)
    cache.set(key, statement)
  }
  return statement
}

function insertRows(sqlite: Database, table: string, columns: string[], values: unknown[], chunk: number): void {
  const width = columns.length
  const rows = values.length / width
  for (let start = 0; start < rows; start += chunk) {
    const n = Math.min(chunk, rows - start)
    insertStatement(sqlite, table, columns, n).run(...(values.slice(start * width, (start + n) * width) as never[]))
  }
}

/**
 * Inserts sessions and their events in one transaction, straight into the tables the service
 * writes (same columns, same JSON in `data`), as multi-row statements the way the service writes
 * a batch of events, so the search triggers run exactly as in production. Much faster than running
 * CLIs. No machine snapshot is written: seeded sessions are for reading, and should not be left
 * `queued` in an org whose admission a test exercises. Returns the ids.
 */
export function seedSessions(sqlite: Database, rows: SeedSession[]): string[] {
  const ids: string[] = []
  const sessionValues: unknown[] = []
  const eventValues: unknown[] = []
  for (const row of rows) {
    const id = row.id ?? randomUUID()
    ids.push(id)
    const harness = row.harness ?? 'harness_1'
    const status = row.status ?? 'completed'
    const finished = !['queued', 'allocating', 'running'].includes(status)
    const completedAt = row.completedAt === undefined ? (finished ? row.createdAt + 60_000 : null) : row.completedAt
    const input = row.inputTokens ?? null
    const output = row.outputTokens ?? null
    sessionValues.push(
      id,
      row.orgId,
      row.projectId ?? null,
      row.startedByUserId ?? null,
      row.agent ?? harness,
      harness,
      null,
      '1.0.0',
      status,
      row.mode ?? 'headless',
      'resumable',
      finished ? 'paused' : 'running',
      row.prompt,
      row.title ?? row.prompt.split('\n', 1)[0]!.slice(0, 80),
      row.repoOwner ?? null,
      row.repoName ?? null,
      row.branch ?? null,
      row.summary ?? null,
      row.error ?? null,
      row.model ?? 'scripted',
      input,
      output,
      input === null && output === null ? null : (input ?? 0) + (output ?? 0),
      row.totalCostUsd ?? null,
      row.toolCallsCount ?? null,
      finished ? 1 : 0,
      row.sessionCapture === undefined ? (finished ? 'complete' : null) : row.sessionCapture,
      '{"harness_version":"1.0.0"}',
      finished ? 1 : 0,
      completedAt,
      row.createdAt,
      completedAt ?? row.createdAt,
    )
    // The status events the service writes on the way: queued, allocating, running, then the end state.
    const path = LIFECYCLE.slice(0, LIFECYCLE.indexOf(status) + 1)
    const statuses = path.length > 0 ? path : [...LIFECYCLE, status]
    let seq = 0
    for (const s of statuses) eventValues.push(id, ++seq, 0, 'status', 'status', JSON.stringify({ status: s, id }), row.createdAt)
    const timestamp = new Date(row.createdAt).toISOString()
    for (const e of row.events ?? []) {
      eventValues.push(id, ++seq, 1, 'harness', e.type, JSON.stringify({ agent: harness, timestamp, ...e }), row.createdAt)
    }
  }
  // Like the service: the rows are committed when the sessions are created, their events later.
  sqlite.transaction(() => insertRows(sqlite, 'sessions', SESSION_COLUMNS, sessionValues, CHUNK.sessions))()
  sqlite.transaction(() => insertRows(sqlite, 'session_events', EVENT_COLUMNS, eventValues, CHUNK.events))()
  return ids
}

/** A `message` event of the transcript. */
export const message = (role: 'user' | 'assistant', content: string): SeedEvent => ({ type: 'message', role, content })
