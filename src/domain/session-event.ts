import { t, type Static } from 'elysia'
import { literals } from './schema-util'

/** Normalized transcript event, spec section 2.8. */
export const SessionEventSchema = t.Object({
  type: literals(['message', 'tool_use', 'tool_result', 'thinking', 'error', 'init', 'result', 'usage', 'attachment', 'hook']),
  agent: literals(['harness_1', 'harness_2', 'harness_3', 'native', 'opaque']),
  timestamp: t.String(),
  role: t.Optional(literals(['user', 'assistant'])),
  content: t.Optional(t.String()),
  tool: t.Optional(t.String()),
  path: t.Optional(t.String()),
  command: t.Optional(t.String()),
  output: t.Optional(t.String()),
  model: t.Optional(t.String()),
  mediaType: t.Optional(t.String()),
  callId: t.Optional(t.String()),
  args: t.Optional(t.Record(t.String(), t.Unknown())),
  success: t.Optional(t.Boolean()),
  inputTokens: t.Optional(t.Integer()),
  outputTokens: t.Optional(t.Integer()),
  cacheReadTokens: t.Optional(t.Integer()),
  cacheCreationTokens: t.Optional(t.Integer()),
  sizeBytes: t.Optional(t.Integer()),
})
export type SessionEvent = Static<typeof SessionEventSchema>
