/**
 * Transcript reads (spec 4.3 messages, 4.4 trajectory): the normalized events a session's
 * harness produced, filtered by turns and roles, and the raw stream as the CLI wrote it.
 */
import { badRequest, notFound } from '../domain/errors'
import { isHarness, type Harness } from '../domain/harness'
import type { SessionEvent } from '../domain/session-event'
import { SessionEventSchema, type MessagesQuery } from './model'
import type { OrgAccess } from '../identity/service'
import type { SessionLookup } from '../session-record/ports'
import type { SessionRow, SessionStore } from '../session-record/store'

export const ROLES = ['user', 'assistant', 'thinking', 'tools'] as const
/** Transcript formats: a harness's own raw stream, the service's normalized NDJSON, or unknown. */
export type TranscriptFormat = Harness | 'native' | 'opaque'
export type Role = (typeof ROLES)[number]

/** Where `key` says a transcript lives: rows of the session's raw stdout lines. */
const STORAGE_PREFIX = 'session_transcript_lines'
/** The fields of spec 2.8; parser-only extras (a shell result's exit code) are not part of a read. */
const EVENT_FIELDS = Object.keys(SessionEventSchema.properties)

export class TranscriptService {
  constructor(
    private readonly queries: SessionLookup,
    private readonly store: SessionStore,
  ) {}

  /** GET …/messages: turns first (`first`/`last`), then roles (`include`/`exclude`). */
  messages(access: OrgAccess, projectRef: string, id: string, query: MessagesQuery) {
    const filter = roleFilter(query)
    if (query.first !== undefined && query.last !== undefined) throw badRequest('first and last cannot be used together')
    const row = this.queries.find(access, projectRef, id)
    const events = this.events(row.id)
    if (events.length === 0) throw notFound('No transcript has been captured for this session yet')
    let turns = splitTurns(events)
    if (query.first !== undefined) turns = turns.slice(0, query.first)
    if (query.last !== undefined) turns = turns.slice(-query.last)
    const kept = turns.flat().filter(filter)
    return { execution_id: row.id, agent: row.agent, format: this.format(row), event_count: kept.length, events: kept }
  }

  /** GET …/trajectory as JSON: where the raw transcript is and how big. */
  trajectory(access: OrgAccess, projectRef: string, id: string) {
    const row = this.queries.find(access, projectRef, id)
    const raw = this.raw(row)
    const stored = this.store.allEvents(row.id).filter((e) => e.kind === 'harness')
    const capturedAt = stored.at(-1)?.createdAt ?? null
    return {
      execution_id: row.id,
      format: raw.format,
      bytes: Buffer.byteLength(raw.body),
      key: `${STORAGE_PREFIX}/${row.id}`,
      agent: row.agent,
      captured_at: capturedAt === null ? null : new Date(capturedAt).toISOString(),
    }
  }

  /** GET …/trajectory with `Accept: application/x-ndjson`: the bytes and their format. */
  trajectoryRaw(access: OrgAccess, projectRef: string, id: string): { format: TranscriptFormat; body: string } {
    return this.raw(this.queries.find(access, projectRef, id))
  }

  /** The normalized events, spec fields only, in stream order. */
  events(sessionId: string): SessionEvent[] {
    return this.store
      .allEvents(sessionId)
      .filter((e) => e.kind === 'harness')
      .map((e) => Object.fromEntries(EVENT_FIELDS.filter((k) => e.data[k] !== undefined).map((k) => [k, e.data[k]])) as SessionEvent)
  }

  /**
   * The CLI's stdout lines as NDJSON; a session whose harness left no raw lines (there is none in
   * this build, but older rows may) falls back to the service's own `native` format.
   */
  private raw(row: SessionRow): { format: TranscriptFormat; body: string } {
    const lines = this.store.transcriptLines(row.id)
    if (lines.length > 0) return { format: this.format(row), body: lines.map((l) => `${l.line}\n`).join('') }
    const events = this.events(row.id)
    if (events.length === 0) throw notFound('No transcript has been captured for this session yet')
    return { format: 'native', body: events.map((e) => `${JSON.stringify(e)}\n`).join('') }
  }

  private format(row: SessionRow): TranscriptFormat {
    return isHarness(row.harness) ? row.harness : 'opaque'
  }
}

/**
 * A turn starts at each user message; events before the first one belong to the first turn. The
 * CLI's `init`, which each run reports just before the prompt, opens the turn with it.
 */
export function splitTurns(events: SessionEvent[]): SessionEvent[][] {
  const turns: SessionEvent[][] = [[]]
  for (const event of events) {
    const current = turns.at(-1)!
    const startsTurn = event.type === 'message' && event.role === 'user'
    if (startsTurn && current.some((e) => e.type === 'message' && e.role === 'user')) {
      let keep = current.length
      while (keep > 0 && current[keep - 1]!.type === 'init') keep--
      turns.push(current.splice(keep))
    }
    turns.at(-1)!.push(event)
  }
  return turns.filter((turn) => turn.length > 0)
}

/** The role an event counts as for include/exclude; null for events of no role (init, usage, result…). */
export function roleOf(event: SessionEvent): Role | null {
  if (event.type === 'message') return event.role === 'user' ? 'user' : 'assistant'
  if (event.type === 'thinking') return 'thinking'
  if (event.type === 'tool_use' || event.type === 'tool_result') return 'tools'
  return null
}

/**
 * The predicate of `include` or `exclude` (400 for both at once or an unknown role). `include`
 * keeps only events of the listed roles; `exclude` drops those and keeps the rest.
 */
function roleFilter(query: MessagesQuery): (event: SessionEvent) => boolean {
  if (query.include !== undefined && query.exclude !== undefined) throw badRequest('include and exclude cannot be used together')
  const param = query.include !== undefined ? 'include' : query.exclude !== undefined ? 'exclude' : null
  if (!param) return () => true
  const roles = parseRoles(param, query[param]!)
  return param === 'include' ? (e) => roles.has(roleOf(e)!) : (e) => !roles.has(roleOf(e)!)
}

function parseRoles(param: string, value: string): Set<Role> {
  const names = value
    .split(',')
    .map((r) => r.trim())
    .filter(Boolean)
  if (names.length === 0) throw badRequest(`${param} must list at least one role (${ROLES.join(', ')})`)
  for (const name of names) {
    if (!(ROLES as readonly string[]).includes(name)) throw badRequest(`${param}: unknown role "${name}"; use ${ROLES.join(', ')}`)
  }
  return new Set(names as Role[])
}
