import { Elysia, t, type Static } from 'elysia'
import { literals, nullable } from '../domain/schema-util'
import { CAPTURE_STATES, RUN_MODES, SESSION_STATUSES } from '../domain/status'
import { HARNESSES } from '../domain/harness'
import { SEARCH_SORTS } from './query'
import { ArtifactFile, HarnessSchema, SessionStatusSchema } from '../domain/api-schemas'

const NString = nullable(t.String())
const Count = t.Integer({ minimum: 0 })

/** Session, the org-wide search row (spec 2.4). */
export const Session = t.Object({
  id: t.String(),
  kind: literals(['cloud', 'local'] as const),
  short_id: t.String(),
  title: NString,
  project: NString,
  org_id: NString,
  project_id: NString,
  agent: NString,
  harness: HarnessSchema,
  harness_version_requested: NString,
  harness_version_resolved: NString,
  model: NString,
  mode: nullable(literals(RUN_MODES)),
  status: SessionStatusSchema,
  prompt: NString,
  branch: NString,
  pr_url: NString,
  error: NString,
  session_capture: nullable(literals(CAPTURE_STATES)),
  message_count: Count,
  input_tokens: Count,
  output_tokens: Count,
  cache_read_tokens: Count,
  cache_write_tokens: Count,
  tool_call_count: Count,
  artifact_count: Count,
  cost_usd: t.Number(),
  duration_ms: nullable(t.Integer()),
  started_by: nullable(t.Object({ name: NString, avatar_url: NString })),
  summary: nullable(t.String({ maxLength: 200 })),
  artifacts: t.Array(ArtifactFile, { maxItems: 6 }),
  agent_profile: nullable(t.Object({ id: NString, name: NString })),
  forked_from: t.Optional(
    t.Object(
      { session: t.String(), turn: t.Integer({ minimum: 0 }) },
      { description: 'Only on a fork: the session it was forked from and that session’s last turn then. agentd’s own field.' },
    ),
  ),
  created_at: t.String({ format: 'date-time' }),
  updated_at: NString,
})

export const SessionList = t.Object({
  sessions: t.Array(Session),
  count: nullable(t.Integer()),
  next_cursor: NString,
})

/** 409 when a selector matches several sessions. */
export const AmbiguousSelector = t.Object({
  code: t.Literal('AMBIGUOUS_SELECTOR'),
  message: t.String(),
  candidates: t.Array(Session),
})

const TIME = 'Relative to now (30s, 15m, 2h, 7d, 2w) or ISO 8601 (a date or a date-time; UTC when no offset is given)'

/** Query of `GET /o/{org}/sessions` (spec 4.1). Times and the cursor are checked by `parseTime` / `decodeCursor`. */
export const SearchQuery = t.Object({
  selector: t.Optional(
    t.String({ minLength: 1, maxLength: 500, description: 'Full id, unique id prefix or title; switches to resolution' }),
  ),
  q: t.Optional(t.Array(t.String({ maxLength: 1000 }), { maxItems: 32, description: 'Each value is a phrase; every one must match' })),
  project: t.Optional(t.String({ minLength: 1, description: 'Handle or id' })),
  agent: t.Optional(t.String({ minLength: 1, description: 'Harness as dispatched, e.g. harness_1@2.1.197' })),
  kind: t.Optional(literals(['cloud', 'local'] as const)),
  harness: t.Optional(literals(HARNESSES)),
  mode: t.Optional(literals(RUN_MODES)),
  model: t.Optional(t.String({ minLength: 1 })),
  repo: t.Optional(t.String({ pattern: '^[^/\\s]+/[^/\\s]+$', description: 'owner/name' })),
  status: t.Optional(literals(SESSION_STATUSES)),
  forked_from: t.Optional(t.String({ minLength: 1, description: 'Only the forks of this session (its full id). agentd’s own filter.' })),
  since: t.Optional(t.String({ minLength: 1, description: `Created at or after. ${TIME}` })),
  until: t.Optional(t.String({ minLength: 1, description: `Created before. ${TIME}` })),
  sort: t.Optional(literals(SEARCH_SORTS)),
  count: t.Optional(t.Boolean()),
  limit: t.Optional(t.Integer({ minimum: 1, maximum: 500 })),
  cursor: t.Optional(t.String({ minLength: 1, maxLength: 1000 })),
})

export type Session = Static<typeof Session>
export type SearchQuery = Static<typeof SearchQuery>

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const searchModels = new Elysia({ name: 'agentd/models/search' }).model({ Session })
