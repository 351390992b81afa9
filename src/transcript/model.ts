import { Elysia, t, type Static } from 'elysia'
import { literals, nullable, optionalFields } from '../domain/schema-util'
import type { SessionEvent } from '../domain/session-event'

/** Normalized transcript event, spec section 2.8 (its type for the layers below HTTP: domain/session-event.ts). */
export const SessionEventSchema = t.Object({
  type: literals(['message', 'tool_use', 'tool_result', 'thinking', 'error', 'init', 'result', 'usage', 'attachment', 'hook']),
  agent: literals(['harness_1', 'harness_2', 'harness_3', 'native', 'opaque']),
  timestamp: t.String(),
  role: t.Optional(literals(['user', 'assistant'])),
  ...optionalFields(t.String, ['content', 'tool', 'path', 'command', 'output', 'model', 'mediaType', 'callId']),
  args: t.Optional(t.Record(t.String(), t.Unknown())),
  success: t.Optional(t.Boolean()),
  ...optionalFields(t.Integer, ['inputTokens', 'outputTokens', 'cacheReadTokens', 'cacheCreationTokens', 'sizeBytes']),
})

// The schema and the domain's type say the same thing: the build fails when one changes alone.
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false
export const EVENT_SCHEMA_MATCHES_TYPE: Same<Static<typeof SessionEventSchema>, SessionEvent> = true

/** Spec 4.3: roles are checked by the service, so an unknown one is a 400 with a sentence naming it. */
export const MessagesQuery = t.Object({
  include: t.Optional(t.String({ description: 'Comma-separated roles to keep: user, assistant, thinking, tools. Not with exclude.' })),
  exclude: t.Optional(t.String({ description: 'Comma-separated roles to drop.' })),
  first: t.Optional(t.Integer({ minimum: 1, description: 'Keep the first N turns. Not with last.' })),
  last: t.Optional(t.Integer({ minimum: 1, description: 'Keep the last N turns.' })),
})

export const TranscriptFormat = literals(['harness_1', 'harness_2', 'harness_3', 'native', 'opaque'] as const)

export const MessagesResponse = t.Object({
  execution_id: t.String(),
  agent: nullable(t.String()),
  format: TranscriptFormat,
  event_count: t.Integer(),
  events: t.Array(SessionEventSchema),
})

export const TrajectoryResponse = t.Object({
  execution_id: t.String(),
  format: nullable(t.String()),
  bytes: nullable(t.Integer()),
  key: t.String({ description: 'Storage key of the transcript' }),
  agent: nullable(t.String()),
  captured_at: nullable(t.String({ format: 'date-time' })),
})

/** How a tool call ended (spec 2.9). */
export const OUTCOMES = ['success', 'error', 'cancelled'] as const
export type Outcome = (typeof OUTCOMES)[number]

/** Spec 2.9. */
export const ToolCallSchema = t.Object({
  call_key: t.String(),
  ordinal: t.Integer({ minimum: 0 }),
  tool: t.String(),
  program: nullable(t.String()),
  programs: t.Array(t.String()),
  input: t.String({ description: 'JSON text of the call input' }),
  outcome: t.Optional(literals(OUTCOMES)),
  exit_code: t.Optional(t.Integer()),
  error_code: t.Optional(t.String()),
  end_timestamp: t.Optional(t.String({ format: 'date-time' })),
})

export const ToolCallsQuery = t.Object({
  tool: t.Optional(t.String()),
  program: t.Optional(t.String({ description: 'Only calls that ran this program' })),
  outcome: t.Optional(literals(OUTCOMES)),
  limit: t.Optional(t.Integer({ minimum: 1, maximum: 1000, default: 100 })),
})

export const ToolCallsResponse = t.Object({ tool_calls: t.Array(ToolCallSchema) })

export type MessagesQuery = Static<typeof MessagesQuery>
export type ToolCallsQuery = Static<typeof ToolCallsQuery>
export type ToolCall = Static<typeof ToolCallSchema>

/** GET …/logs: a session's runtime log (spec 4.2). */
export const SessionLogs = t.Object({
  logs: t.String(),
  source: literals(['loki', 'stored'] as const),
  status: t.String(),
  truncated: t.Boolean(),
})

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const transcriptModels = new Elysia({ name: 'agentd/models/transcript' }).model({
  SessionEvent: SessionEventSchema,
  ToolCall: ToolCallSchema,
})
