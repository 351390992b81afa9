import { t, type Static } from 'elysia'
import { literals } from '../../domain/schema-util'
import { CAPTURE_STATES, RUN_MODES } from '../../domain/status'
import { SearchQuerySchema } from '../../domain/search'
import { ArtifactFile, HarnessSchema, SessionStatusSchema } from '../sessions/model'

const Nullable = <T extends Parameters<typeof t.Union>[0][number]>(schema: T) => t.Union([schema, t.Null()])
const NString = Nullable(t.String())
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
  mode: Nullable(literals(RUN_MODES)),
  status: SessionStatusSchema,
  prompt: NString,
  branch: NString,
  pr_url: NString,
  error: NString,
  session_capture: Nullable(literals(CAPTURE_STATES)),
  message_count: Count,
  input_tokens: Count,
  output_tokens: Count,
  cache_read_tokens: Count,
  cache_write_tokens: Count,
  tool_call_count: Count,
  artifact_count: Count,
  cost_usd: t.Number(),
  duration_ms: Nullable(t.Integer()),
  started_by: Nullable(t.Object({ name: NString, avatar_url: NString })),
  summary: Nullable(t.String({ maxLength: 200 })),
  artifacts: t.Array(ArtifactFile, { maxItems: 6 }),
  agent_profile: Nullable(t.Object({ id: NString, name: NString })),
  created_at: t.String({ format: 'date-time' }),
  updated_at: NString,
})

export const SessionList = t.Object({
  sessions: t.Array(Session),
  count: Nullable(t.Integer()),
  next_cursor: NString,
})

/** 409 when a selector matches several sessions. */
export const AmbiguousSelector = t.Object({
  code: t.Literal('AMBIGUOUS_SELECTOR'),
  message: t.String(),
  candidates: t.Array(Session),
})

export const SearchQuery = SearchQuerySchema

export const OrgParams = t.Object({ org: t.String() })

export type Session = Static<typeof Session>
