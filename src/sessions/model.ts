import { Elysia, t, type Static } from 'elysia'
import { ArtifactFile, HarnessSchema, SessionStatusSchema } from '../domain/api-schemas'
import { literals, nullable } from '../domain/schema-util'
import { EFFORTS, SPEEDS } from '../domain/harness'
import { CAPTURE_STATES, PERSISTENCE_MODES, RUN_MODES } from '../domain/status'

const NString = nullable(t.String())
const NInt = nullable(t.Integer())

export const CloudRunSession = t.Object({
  execution_id: t.String(),
  kind: literals(['cloud', 'local'] as const),
  org_id: NString,
  project_id: NString,
  agent: NString,
  status: SessionStatusSchema,
  persistence_mode: nullable(literals(PERSISTENCE_MODES)),
  machine_state: NString,
  queue_position: nullable(
    t.Integer({
      minimum: 1,
      description:
        'While `queued`: its place in the order sessions are started in (1 starts next), fair across orgs; null ' +
        'otherwise. agentd’s own field.',
    }),
  ),
  sandbox_generation: NInt,
  prompt: NString,
  repo_owner: NString,
  repo_name: NString,
  branch: NString,
  pr_url: NString,
  summary: NString,
  error: NString,
  started_by: nullable(t.Object({ name: NString, avatar_url: NString })),
  input_tokens: NInt,
  output_tokens: NInt,
  cache_read_tokens: NInt,
  cache_write_tokens: NInt,
  reasoning_tokens: NInt,
  total_tokens: NInt,
  total_cost_usd: nullable(t.Number()),
  model: NString,
  tool_calls_count: NInt,
  tool_errors_count: NInt,
  turns_count: NInt,
  files_produced: NInt,
  attachments: t.Array(t.Object({ id: t.String(), name: t.String(), mime: t.String(), size: t.Integer(), expired_at: NString })),
  artifacts: t.Array(ArtifactFile),
  artifact_count: t.Integer(),
  harness_version_requested: NString,
  harness_version_resolved: NString,
  profile_id: NString,
  profile_revision: NInt,
  profile_digest: NString,
  requested_overrides: nullable(t.Object({ model: t.Optional(t.String()), effort: t.Optional(t.String()), speed: t.Optional(t.String()) })),
  agent_profile: nullable(t.Object({ id: t.Optional(t.String()), name: t.Optional(t.String()) })),
  effective: nullable(t.Record(t.String(), NString)),
  snapshot: nullable(t.Record(t.String(), t.Unknown())),
  effective_config: nullable(t.Record(t.String(), t.Unknown())),
  session_capture: nullable(literals(CAPTURE_STATES)),
  forked_from: t.Optional(
    t.Object(
      { session: t.String(), turn: t.Integer({ minimum: 0 }) },
      {
        description: 'Only on a fork (POST …/fork): the session it was forked from and that session’s last turn then. agentd’s own field.',
      },
    ),
  ),
  created_at: t.String({ format: 'date-time' }),
  updated_at: NString,
})

export const SessionAnswer = t.Object({
  text: NString,
  structured: nullable(t.Record(t.String(), t.Unknown())),
  schema_valid: nullable(t.Boolean()),
})

export const SessionResult = t.Object({
  execution_id: t.String(),
  status: t.String(),
  branch: NString,
  pr_url: NString,
  output: NString,
  completed_at: NString,
  result: nullable(SessionAnswer),
})

/** `Idempotency-Key` (contract section 8): 1 to 255 printable ASCII characters, space to tilde. */
export const IdempotencyHeaders = t.Object({
  'idempotency-key': t.Optional(
    t.String({
      minLength: 1,
      maxLength: 255,
      pattern: '^[\\x20-\\x7e]+$',
      description: 'Retry-safe create (contract section 8): the same key and body answer with the session first made, for 24 hours.',
    }),
  ),
})

/** Shape B content blocks (spec 4.1): text, an image by URL, a document as base64, an upload by id. */
export const InputBlock = t.Union([
  t.Object({ type: t.Literal('text'), text: t.String() }),
  t.Object({ type: t.Literal('image'), source: t.Object({ type: t.Literal('url'), url: t.String({ minLength: 1, maxLength: 2048 }) }) }),
  t.Object({
    type: t.Literal('document'),
    name: t.String({ minLength: 1, maxLength: 255 }),
    source: t.Object({ type: t.Literal('base64'), media_type: t.String({ minLength: 1, maxLength: 255 }), data: t.String() }),
  }),
  t.Object({ type: t.Literal('file'), source: t.Object({ type: t.Literal('file'), file_id: t.String({ minLength: 1, maxLength: 255 }) }) }),
])
export type InputBlock = Static<typeof InputBlock>

/**
 * Shape A (`prompt`) or shape B (`input`), one schema (contract section 8 tells them apart).
 * Enumerations are checked here; catalog rules in the service.
 */
export const CreateSessionBody = t.Object({
  agent: t.Optional(t.String({ minLength: 1 })),
  prompt: t.Optional(t.String()),
  input: t.Optional(
    t.Union([t.String(), t.Array(InputBlock, { maxItems: 100 }), InputBlock], {
      description: 'Shape B: the task as a string or content blocks.',
    }),
  ),
  harness: t.Optional(HarnessSchema),
  strategy: t.Optional(t.Literal('platform', { description: "Shape B: run on agentd's models, metered on the plan (the default)." })),
  skills: t.Optional(t.Array(t.Union([t.String({ maxLength: 2048 }), t.Object({ url: t.String({ maxLength: 2048 }) })]), { maxItems: 20 })),
  connections: t.Optional(
    t.Array(
      t.Union([
        t.String({ minLength: 1, maxLength: 200 }),
        t.Object({
          url: t.String({ maxLength: 2048 }),
          name: t.Optional(t.String({ maxLength: 63 })),
          auth: t.Optional(t.Unknown()),
          token: t.Optional(t.Unknown()),
        }),
      ]),
      { maxItems: 20 },
    ),
  ),
  model: t.Optional(t.String({ minLength: 1 })),
  effort: t.Optional(literals(EFFORTS)),
  speed: t.Optional(literals(SPEEDS)),
  mode: t.Optional(literals(RUN_MODES)),
  persistence: t.Optional(literals(PERSISTENCE_MODES)),
  account_id: t.Optional(t.String()),
  base_branch: t.Optional(t.String({ minLength: 1 })),
  on_pr: t.Optional(t.Integer({ minimum: 1 })),
  output_schema: t.Optional(t.Record(t.String(), t.Unknown())),
  // A saved agent and sources. A key run gets 422 API_KEY_FIELD_UNSUPPORTED for them.
  agent_id: t.Optional(t.String()),
  resources: t.Optional(t.Array(t.Object({ url: t.String(), connection: t.Optional(t.String()) }))),
})

export const PatchSessionBody = t.Object(
  { status: literals(['cancelled', 'paused', 'running', 'stop_turn'] as const) },
  { additionalProperties: false },
)

export const PatchSessionResponse = t.Object({ ok: t.Literal(true), status: literals(['cancelled', 'stop_turn_confirmed'] as const) })

export const ProjectListQuery = t.Object({
  status: t.Optional(SessionStatusSchema),
  limit: t.Optional(t.Integer({ minimum: 1, maximum: 100 })),
})

export const ProjectParams = t.Object({ org: t.String(), project: t.String() })

export type CreateSessionBody = Static<typeof CreateSessionBody>

export const PostMessageBody = t.Object({ content: t.String({ minLength: 1 }) })

export const MessageSent = t.Object({ ok: t.Literal(true), status: t.Literal('message_sent') })
export const MessageQueued = t.Object({
  ok: t.Literal(true),
  status: t.Literal('queued'),
  message_id: t.String({ format: 'uuid' }),
  position: t.Integer({ minimum: 1 }),
})

export const OperationAccepted = t.Object({ operation_id: t.String() })

export const EventsQuery = t.Object({ cursor: t.Optional(t.String()) })

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const sessionModels = new Elysia({ name: 'agentd/models/sessions' }).model({ CloudRunSession })
