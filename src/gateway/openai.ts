/**
 * The OpenAI Responses protocol (POST /v1/responses), as Codex's custom model provider speaks it
 * (`wire_api = "responses"`), answered by the scripted model. Streaming follows the documented
 * event order: https://platform.openai.com/docs/api-reference/responses-streaming
 *
 * Codex offers no file-write tool, only a shell (`exec_command`), so `write` and `artifact` steps
 * become shell commands. A `text.format` of type json_schema is enforced as a real provider does:
 * the final text must be JSON that conforms, otherwise the request fails.
 */
import { posix } from 'node:path'
import { errorsText, ValidatorCache } from '../domain/json-schema'
import { openaiAllowlist } from './allowlist'
import type { ProtocolContext, ProtocolHandler } from './protocol'
import {
  isInjectedText,
  mcpToolName,
  nextReply,
  replyUsage,
  type ConversationEntry,
  type Reply,
  type ReplyPart,
  type TokenCounts,
} from './script'
import type { Metered } from './upstream'
import { bearer, parseJson, randomId, sseResponse, stall, writeFileCommand } from './wire'
import { isObject } from '../domain/values'

type Json = Record<string, unknown>
type Item = Json & { type: string; id: string }

interface ResponsesRequest {
  model: string
  input: string | Json[]
  tools?: Json[]
  stream?: boolean
  text?: { format?: { type?: string; name?: string; schema?: Json } }
}

/** As for an output_schema; counted in UTF-16 units of its JSON, never more than its bytes, so every accepted output_schema fits. */
const MAX_FORMAT_SCHEMA_BYTES = 64 * 1024
/** Codex repeats one schema per turn; a few sessions' worth are kept compiled. */
const formatValidators = new ValidatorCache(32)

/** Shell tools Codex may offer, in order of preference, and how each takes a command. */
const SHELL_TOOLS: { name: string; args: (command: string) => Json }[] = [
  // 30 s is the longest exec_command waits before handing back a session id to poll.
  { name: 'exec_command', args: (command) => ({ cmd: command, yield_time_ms: 30_000 }) },
  { name: 'shell_command', args: (command) => ({ command }) },
  { name: 'shell', args: (command) => ({ command: ['bash', '-lc', command] }) },
]

/** The error type of each refusal, as the Responses API names them. */
const REFUSALS = {
  400: 'invalid_request_error',
  402: 'insufficient_quota',
  403: 'model_not_found',
  429: 'rate_limit_exceeded',
  503: 'server_error',
} as const

export const openaiProtocol: ProtocolHandler = {
  provider: 'openai',
  matches: (method, pathname) => method === 'POST' && pathname === '/v1/responses',
  credential: (req) => bearer(req.headers.get('authorization')),
  unauthorized: () => errorResponse(401, 'invalid_api_key', 'Incorrect API key provided.'),
  refuse: (status, message) => errorResponse(status, REFUSALS[status], message),
  modelOf: (_url, body) => (isObject(body) && typeof body.model === 'string' ? body.model : null),
  handle: handleResponses,
  upstream: {
    allowlist: openaiAllowlist,
    // The provider's base URL ends in /v1, as a CLI's would.
    target: (url, baseUrl) => baseUrl + url.pathname.replace(/^\/v1/, '') + url.search,
    authHeaders: (apiKey) => ({ authorization: `Bearer ${apiKey}` }),
    usage: upstreamUsage,
  },
}

async function handleResponses(req: Request, ctx: ProtocolContext): Promise<Response> {
  const raw = await req.text()
  const body = parseRequest(raw)
  if (typeof body === 'string') return errorResponse(400, 'invalid_request_error', body)

  const reply = nextReply(toConversation(body.input))
  if (reply.failure !== null) {
    // A 4xx, not a 5xx: Codex retries server errors, and the script wants the turn to fail now.
    await stall(reply.sleepMs, req.signal)
    return errorResponse(400, 'invalid_request_error', reply.failure)
  }
  const output = toItems(reply, body, ctx.session.workspace)
  const problem = schemaProblem(output, body.text?.format)
  if (problem) return errorResponse(400, 'invalid_request_error', problem)

  const usage = withoutCacheWrites(replyUsage(reply, raw.length))
  const base = {
    id: `resp_${randomId()}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    model: body.model,
    output: [] as Item[],
  }
  const completed = { ...base, status: 'completed', output, usage: wireUsage(usage) }
  const sent = () => ctx.meter({ model: body.model, ...usage })
  if (!body.stream) {
    await stall(reply.sleepMs, req.signal)
    sent()
    return Response.json(completed)
  }
  return sseResponse(req.signal, async (out, gone) => {
    let seq = 0
    const send = (type: string, data: Json) => out.send({ type, sequence_number: seq++, ...data }, type)
    send('response.created', { response: { ...base, status: 'in_progress' } })
    send('response.in_progress', { response: { ...base, status: 'in_progress' } })
    await stall(reply.sleepMs, gone, () => out.comment('keepalive'))
    output.forEach((item, index) => itemEvents(item, index, send))
    send('response.completed', { response: completed })
    sent()
  })
}

/**
 * Maps Responses input to the scripted model's view. Developer and system messages are
 * instructions, and a user message that is wholly injected context (`<environment_context>`)
 * is not the user speaking.
 */
function toConversation(input: ResponsesRequest['input']): ConversationEntry[] {
  if (typeof input === 'string') return [{ role: 'user', text: input }]
  const entries: ConversationEntry[] = []
  for (const item of input) {
    const type = item.type ?? (item.role ? 'message' : undefined)
    if (type === 'message' && item.role === 'user') {
      const texts = contentTexts(item.content).filter((t) => t.trim() !== '' && !isInjectedText(t))
      if (texts.length > 0) entries.push({ role: 'user', text: texts.join('\n') })
    } else if (type === 'message' && item.role === 'assistant') {
      entries.push({ role: 'assistant' })
    } else if (typeof type === 'string' && type.endsWith('_call_output')) {
      entries.push({ role: 'tool' })
    } else if (type === 'reasoning' || (typeof type === 'string' && type.endsWith('_call'))) {
      entries.push({ role: 'assistant' })
    }
  }
  return entries
}

function contentTexts(content: unknown): string[] {
  if (typeof content === 'string') return [content]
  if (!Array.isArray(content)) return []
  return content.filter(isObject).flatMap((part) => (typeof part.text === 'string' ? [part.text] : []))
}

/** Renders a reply as Responses output items, calling the shell tool the client offered. */
function toItems(reply: Reply, body: ResponsesRequest, workspace: string): Item[] {
  const offered = new Set((body.tools ?? []).map((t) => t.name))
  const shell = SHELL_TOOLS.find((t) => offered.has(t.name))
  const shellCall = (command: string): Item =>
    shell ? functionCall(shell.name, shell.args(command)) : message(`(no shell tool was offered to run: ${command})`)
  return reply.parts.map((part: ReplyPart): Item => {
    switch (part.type) {
      case 'thinking':
        return { type: 'reasoning', id: `rs_${randomId()}`, summary: [{ type: 'summary_text', text: part.text }] }
      case 'text':
        return message(part.text)
      case 'bash':
        return shellCall(part.command)
      case 'write':
        return shellCall(writeFileCommand(posix.resolve(workspace, part.path), part.content))
      case 'artifact':
        return shellCall(writeFileCommand(posix.join(workspace, '.agentd/artifacts', part.name), part.content))
      case 'structured':
        return message(JSON.stringify(part.value))
      case 'mcp': {
        const tools = offeredFunctions(body)
        const name = mcpToolName([...tools.keys()], part.server, part.tool)
        const chosen = name ? tools.get(name) : undefined
        return chosen
          ? functionCall(chosen.name, part.input, chosen.namespace)
          : message(`(no tool ${part.tool} of ${part.server} was offered)`)
      }
    }
  })
}

/**
 * With `text.format` json_schema, the text that ends the turn must conform, as constrained
 * decoding guarantees on a real provider. Replies that call a tool are not constrained.
 */
function schemaProblem(output: Item[], format: NonNullable<ResponsesRequest['text']>['format']): string | null {
  if (format?.type !== 'json_schema' || !isObject(format.schema)) return null
  if (output.some((item) => item.type === 'function_call')) return null
  const last = output.filter((item) => item.type === 'message').at(-1)
  const text = last ? contentTexts(last.content).join('') : ''
  const value = parseJson(text)
  // The schema comes from the sandbox. Its patterns run on the linear-time engine; its size is
  // capped as an output_schema's is (the only schema Codex has is one), so compiling stays cheap.
  const schema = JSON.stringify(format.schema)
  if (schema.length > MAX_FORMAT_SCHEMA_BYTES) return 'text.format.schema is larger than 64 KiB'
  let validate
  try {
    validate = formatValidators.get(schema)
  } catch (err) {
    return `text.format.schema is not a valid JSON Schema: ${(err as Error).message}`
  }
  if (value === undefined) return `the scripted reply is not JSON, but text.format requires the schema "${format.name ?? 'schema'}"`
  if (!validate(value))
    return `the scripted reply does not match text.format schema "${format.name ?? 'schema'}": ${errorsText(validate.errors)}`
  return null
}

/** The streaming events of one complete output item, from `output_item.added` to `.done`. */
function itemEvents(item: Item, index: number, send: (type: string, data: Json) => void): void {
  const at = { item_id: item.id, output_index: index }
  if (item.type === 'reasoning') {
    send('response.output_item.added', { output_index: index, item: { ...item, summary: [] } })
    const text = (item.summary as { text: string }[])[0]?.text ?? ''
    const part = { type: 'summary_text', text }
    send('response.reasoning_summary_part.added', { ...at, summary_index: 0, part: { ...part, text: '' } })
    send('response.reasoning_summary_text.delta', { ...at, summary_index: 0, delta: text })
    send('response.reasoning_summary_text.done', { ...at, summary_index: 0, text })
    send('response.reasoning_summary_part.done', { ...at, summary_index: 0, part })
  } else if (item.type === 'message') {
    send('response.output_item.added', { output_index: index, item: { ...item, status: 'in_progress', content: [] } })
    const part = (item.content as Json[])[0] ?? {}
    const text = typeof part.text === 'string' ? part.text : ''
    send('response.content_part.added', { ...at, content_index: 0, part: { ...part, text: '' } })
    send('response.output_text.delta', { ...at, content_index: 0, delta: text })
    send('response.output_text.done', { ...at, content_index: 0, text })
    send('response.content_part.done', { ...at, content_index: 0, part })
  } else {
    send('response.output_item.added', { output_index: index, item: { ...item, status: 'in_progress', arguments: '' } })
    send('response.function_call_arguments.delta', { ...at, delta: item.arguments })
    send('response.function_call_arguments.done', { ...at, arguments: item.arguments })
  }
  send('response.output_item.done', { output_index: index, item })
}

function message(text: string): Item {
  return {
    type: 'message',
    id: `msg_${randomId()}`,
    status: 'completed',
    role: 'assistant',
    content: [{ type: 'output_text', text, annotations: [] }],
  }
}

function functionCall(name: string, args: Json, namespace?: string): Item {
  return {
    type: 'function_call',
    id: `fc_${randomId()}`,
    call_id: `call_${randomId()}`,
    name,
    ...(namespace ? { namespace } : {}),
    arguments: JSON.stringify(args),
    status: 'completed',
  }
}

/** OpenAI counts cached tokens inside `input_tokens`; agentd meters uncached input separately. */
function wireUsage(u: TokenCounts): Json {
  const input = u.input + u.cacheRead
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: u.cacheRead },
    output_tokens: u.output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + u.output,
  }
}

/** Counts from a Responses reply: the whole response, or the stream's `response.completed`. */
function upstreamUsage(payload: unknown, sofar: Metered | null): Metered | null {
  if (!isObject(payload)) return sofar
  const response = isObject(payload.response) ? payload.response : payload
  const usage = response.usage
  if (!isObject(usage) || typeof usage.input_tokens !== 'number') return sofar
  const cached =
    isObject(usage.input_tokens_details) && typeof usage.input_tokens_details.cached_tokens === 'number'
      ? usage.input_tokens_details.cached_tokens
      : 0
  return {
    input: usage.input_tokens - cached,
    output: typeof usage.output_tokens === 'number' ? usage.output_tokens : 0,
    cacheRead: cached,
    cacheWrite: 0,
  }
}

/**
 * This protocol has no cache-write count, so scripted cache writes are reported (and metered) as
 * plain input: the gateway meters what the wire says, as it does for a real provider.
 */
function withoutCacheWrites(u: TokenCounts): TokenCounts {
  return { ...u, input: u.input + u.cacheWrite, cacheWrite: 0 }
}

function parseRequest(raw: string): ResponsesRequest | string {
  const body = parseJson(raw)
  if (!isObject(body)) return 'request body must be a JSON object'
  if (typeof body.model !== 'string') return "Missing required parameter: 'model'."
  const input = body.input
  if (typeof input !== 'string' && !(Array.isArray(input) && input.every(isObject)))
    return "Invalid 'input': expected a string or an array of items."
  if (body.tools !== undefined && !(Array.isArray(body.tools) && body.tools.every(isObject))) return "Invalid 'tools': expected an array."
  return body as unknown as ResponsesRequest
}

function errorResponse(status: number, type: string, message: string): Response {
  return Response.json({ error: { message, type, param: null, code: type === 'invalid_api_key' ? 'invalid_api_key' : null } }, { status })
}

/**
 * The functions a request offers, by qualified name: Codex puts a tool server's tools in a
 * `namespace` tool (`mcp__<server>`), whose functions are called with that namespace; a
 * namespaced one is listed as `<namespace>__<name>`.
 */
function offeredFunctions(body: ResponsesRequest): Map<string, { name: string; namespace?: string }> {
  const found = new Map<string, { name: string; namespace?: string }>()
  for (const tool of body.tools ?? []) {
    if (tool.type === 'function' && typeof tool.name === 'string') found.set(tool.name, { name: tool.name })
    if (tool.type === 'namespace' && typeof tool.name === 'string' && Array.isArray(tool.tools)) {
      for (const inner of tool.tools.filter(isObject)) {
        if (typeof inner.name === 'string') found.set(`${tool.name}__${inner.name}`, { name: inner.name, namespace: tool.name })
      }
    }
  }
  return found
}
