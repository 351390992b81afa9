import type { Harness } from './harness'

/**
 * Normalized transcript event, spec section 2.8: what the harness parsers produce and the
 * transcript serves. Its HTTP schema is `SessionEventSchema` (src/transcript/model.ts); the build
 * checks the two agree.
 */
export type SessionEvent = {
  type: 'message' | 'tool_use' | 'tool_result' | 'thinking' | 'error' | 'init' | 'result' | 'usage' | 'attachment' | 'hook'
  agent: Harness | 'native' | 'opaque'
  timestamp: string
  role?: 'user' | 'assistant'
  content?: string
  tool?: string
  path?: string
  command?: string
  output?: string
  model?: string
  mediaType?: string
  callId?: string
  args?: Record<string, unknown>
  success?: boolean
  inputTokens?: number
  outputTokens?: number
  cacheReadTokens?: number
  cacheCreationTokens?: number
  sizeBytes?: number
}
