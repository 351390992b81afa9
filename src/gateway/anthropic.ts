/**
 * The Anthropic Messages protocol (POST /v1/messages), as Claude Code speaks it, answered by the
 * scripted model. Streaming replies follow the documented SSE event order:
 * https://docs.anthropic.com/en/api/messages-streaming
 */
import { posix } from 'node:path'
import { anthropicAllowlist } from './allowlist'
import type { ProtocolContext, ProtocolHandler } from './protocol'
import { isInjectedText, mcpToolName, nextReply, replyUsage, type ConversationEntry, type Reply, type TokenCounts } from './script'
import type { Metered } from './upstream'
import { bearer, describeCommand, randomId, sseResponse, stall } from './wire'
import { isObject } from '../domain/values'

/** Claude Code's tool for `--json-schema` runs; the model must call it to deliver the object. */
const STRUCTURED_TOOL = 'StructuredOutput'

type Block = Record<string, unknown> & { type: string }
type WireMessage = Record<string, unknown> & { content: Block[]; usage: Record<string, number> }

interface MessagesRequest {
  model: string
  messages: { role: string; content: string | Block[] }[]
  tools?: { name?: string }[]
  stream?: boolean
}

/** The error type of each refusal, as the Messages API names them. */
const REFUSALS = {
  400: 'invalid_request_error',
  402: 'billing_error',
  403: 'permission_error',
  429: 'rate_limit_error',
  503: 'overloaded_error',
} as const

export const anthropicProtocol: ProtocolHandler = {
  provider: 'anthropic',
  matches: (method, pathname) => method === 'POST' && (pathname === '/v1/messages' || pathname === '/v1/messages/count_tokens'),
  credential: (req) => req.headers.get('x-api-key') ?? bearer(req.headers.get('authorization')),
  unauthorized: () => errorResponse(401, 'authentication_error', 'invalid x-api-key'),
  refuse: (status, message) => errorResponse(status, REFUSALS[status], message),
  modelOf: (_url, body) => (isObject(body) && typeof body.model === 'string' ? body.model : null),
  handle: handleMessages,
  upstream: {
    allowlist: anthropicAllowlist,
    target: (url, baseUrl) => baseUrl + url.pathname + url.search,
    authHeaders: (apiKey) => ({ 'x-api-key': apiKey }),
    usage: upstreamUsage,
  },
}

/**
 * Counts from a Messages reply: the whole message, or the stream's `message_start` (input and
 * cache counts) and `message_delta` (the final output count, cumulative).
 */
function upstreamUsage(payload: unknown, sofar: Metered | null): Metered | null {
  if (!isObject(payload)) return sofar
  const usage = payload.type === 'message_start' && isObject(payload.message) ? payload.message.usage : payload.usage
  if (!isObject(usage)) return sofar
  const n = (v: unknown, fallback: number) => (typeof v === 'number' ? v : fallback)
  const base = sofar ?? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 }
  return {
    input: n(usage.input_tokens, base.input),
    output: n(usage.output_tokens, base.output),
    cacheRead: n(usage.cache_read_input_tokens, base.cacheRead),
    cacheWrite: n(usage.cache_creation_input_tokens, base.cacheWrite),
  }
}

async function handleMessages(req: Request, ctx: ProtocolContext): Promise<Response> {
  const raw = await req.text()
  const body = parseRequest(raw)
  if (typeof body === 'string') return errorResponse(400, 'invalid_request_error', body)
  if (new URL(req.url).pathname.endsWith('/count_tokens')) return Response.json({ input_tokens: Math.ceil(raw.length / 4) })

  const reply = nextReply(toConversation(body.messages))
  // A 4xx, not a 5xx: the CLI retries server errors, and the script wants the turn to fail now.
  if (reply.failure !== null) {
    await stall(reply.sleepMs, req.signal)
    return errorResponse(400, 'invalid_request_error', reply.failure)
  }
  const offersStructured = (body.tools ?? []).some((t) => t.name === STRUCTURED_TOOL)
  const content = toBlocks(
    reply,
    ctx.session.workspace,
    offersStructured,
    (body.tools ?? []).flatMap((t) => (t.name ? [t.name] : [])),
  )
  const usage = replyUsage(reply, raw.length)
  const message = {
    id: `msg_${randomId()}`,
    type: 'message',
    role: 'assistant',
    model: body.model,
    content,
    stop_reason: content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn',
    stop_sequence: null,
    usage: wireUsage(usage),
  }
  // Metered when the reply leaves, so a turn stopped during a stall is not billed for it.
  const sent = () => ctx.meter({ model: body.model, ...usage })
  if (body.stream) return streamResponse(message, reply.sleepMs, req.signal, sent)
  await stall(reply.sleepMs, req.signal)
  sent()
  return Response.json(message)
}

/** Maps Messages history to the scripted model's view: genuine user text, tool results, replies. */
function toConversation(messages: MessagesRequest['messages']): ConversationEntry[] {
  const entries: ConversationEntry[] = []
  for (const message of messages) {
    // Claude sends `system` entries mid-conversation (reminders); they are not the user speaking.
    if (message.role === 'assistant') entries.push({ role: 'assistant' })
    if (message.role !== 'user') continue
    const blocks: Block[] = typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : message.content
    const texts = blocks
      .filter((b) => b.type === 'text' && typeof b.text === 'string' && b.text.trim() !== '' && !isInjectedText(b.text))
      .map((b) => b.text as string)
    if (texts.length > 0) entries.push({ role: 'user', text: texts.join('\n') })
    else if (blocks.some((b) => b.type === 'tool_result')) entries.push({ role: 'tool' })
  }
  return entries
}

/** Renders a reply as Messages content blocks with the tools Claude Code offers. */
function toBlocks(reply: Reply, workspace: string, offersStructured: boolean, offered: string[]): Block[] {
  return reply.parts.map((part): Block => {
    switch (part.type) {
      case 'thinking':
        // The CLI stores and replays the signature without checking it; only Anthropic can.
        return { type: 'thinking', thinking: part.text, signature: `scripted-${randomId()}` }
      case 'text':
        return { type: 'text', text: part.text }
      case 'bash':
        return toolUse('Bash', { command: part.command, description: describeCommand(part.command) })
      case 'write':
        return toolUse('Write', { file_path: posix.resolve(workspace, part.path), content: part.content })
      case 'artifact':
        return toolUse('Write', { file_path: posix.join(workspace, '.agentd/artifacts', part.name), content: part.content })
      case 'structured':
        return offersStructured ? toolUse(STRUCTURED_TOOL, part.value) : { type: 'text', text: JSON.stringify(part.value) }
      case 'mcp': {
        const name = mcpToolName(offered, part.server, part.tool)
        return name ? toolUse(name, part.input) : { type: 'text', text: `(no tool ${part.tool} of ${part.server} was offered)` }
      }
    }
  })
}

function streamResponse(message: WireMessage, sleepMs: number, signal: AbortSignal, sent: () => void): Response {
  const [start, ...rest] = sseEvents(message)
  return sseResponse(signal, async (out, gone) => {
    // message_start goes out at once, as the real API does, so headers flush before a stall.
    if (start) out.send(start, start.type)
    await stall(sleepMs, gone, () => out.send({ type: 'ping' }, 'ping'))
    for (const event of rest) out.send(event, event.type)
    sent()
  })
}

/** The Messages streaming events for a complete message, one content block after another. */
function sseEvents(message: WireMessage): ({ type: string } & Record<string, unknown>)[] {
  const { content, usage, stop_reason, stop_sequence, ...head } = message
  const events: ({ type: string } & Record<string, unknown>)[] = [
    {
      type: 'message_start',
      message: { ...head, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 0 } },
    },
  ]
  content.forEach((block, index) => {
    events.push({ type: 'content_block_start', index, content_block: emptyBlock(block) })
    for (const delta of blockDeltas(block)) events.push({ type: 'content_block_delta', index, delta })
    events.push({ type: 'content_block_stop', index })
  })
  events.push({ type: 'message_delta', delta: { stop_reason, stop_sequence }, usage })
  events.push({ type: 'message_stop' })
  return events
}

function emptyBlock(block: Block): Block {
  if (block.type === 'thinking') return { type: 'thinking', thinking: '', signature: '' }
  if (block.type === 'text') return { type: 'text', text: '' }
  return { ...block, input: {} }
}

function blockDeltas(block: Block): Record<string, unknown>[] {
  if (block.type === 'thinking') {
    return [
      { type: 'thinking_delta', thinking: block.thinking },
      { type: 'signature_delta', signature: block.signature },
    ]
  }
  if (block.type === 'text') return [{ type: 'text_delta', text: block.text }]
  return [{ type: 'input_json_delta', partial_json: JSON.stringify(block.input) }]
}

function parseRequest(raw: string): MessagesRequest | string {
  let body: unknown
  try {
    body = JSON.parse(raw)
  } catch {
    return 'request body is not valid JSON'
  }
  if (typeof body !== 'object' || body === null) return 'request body must be a JSON object'
  const { model, messages } = body as Partial<MessagesRequest>
  if (typeof model !== 'string') return 'model: field required'
  if (
    !Array.isArray(messages) ||
    messages.some((m) => typeof m?.role !== 'string' || (typeof m.content !== 'string' && !Array.isArray(m.content)))
  ) {
    return 'messages: must be an array of {role, content}'
  }
  return body as MessagesRequest
}

function wireUsage(u: TokenCounts): Record<string, number> {
  return { input_tokens: u.input, output_tokens: u.output, cache_read_input_tokens: u.cacheRead, cache_creation_input_tokens: u.cacheWrite }
}

function toolUse(name: string, input: Record<string, unknown>): Block {
  return { type: 'tool_use', id: `toolu_${randomId()}`, name, input }
}

function errorResponse(status: number, type: string, message: string): Response {
  return Response.json({ type: 'error', error: { type, message } }, { status })
}
