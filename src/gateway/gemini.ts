/**
 * The Gemini API (`models/{model}:streamGenerateContent?alt=sse` and `:generateContent`), as the
 * Gemini CLI speaks it, answered by the scripted model:
 * https://ai.google.dev/api/generate-content
 *
 * Besides the agent loop, the CLI makes side calls that carry no tools: the model router's
 * classifier (JSON with a response schema) and the session summary (plain text). The scripted
 * model answers those with a conforming object and a one-line summary, never with script steps.
 */
import { posix } from 'node:path'
import { geminiAllowlist } from './allowlist'
import type { ProtocolContext, ProtocolHandler } from './protocol'
import { isInjectedText, mcpToolName, nextReply, replyUsage, type ConversationEntry, type Reply, type TokenCounts } from './script'
import type { Metered } from './upstream'
import { describeCommand, parseJson, randomId, sseResponse, stall } from './wire'
import { isObject } from '../domain/values'

type Json = Record<string, unknown>

interface Content {
  role?: string
  parts?: Json[]
}

interface GenerateRequest {
  contents: Content[]
  tools?: { functionDeclarations?: { name?: string }[] }[]
  generationConfig?: { responseMimeType?: string; responseJsonSchema?: unknown; responseSchema?: unknown }
}

const ROUTE = /^\/(v1beta|v1alpha|v1)\/models\/([^/:]+):(streamGenerateContent|generateContent|countTokens)$/

/** The status of each refusal, as the Gemini API names them. */
const REFUSALS = {
  400: 'INVALID_ARGUMENT',
  402: 'FAILED_PRECONDITION',
  403: 'PERMISSION_DENIED',
  429: 'RESOURCE_EXHAUSTED',
  503: 'UNAVAILABLE',
} as const

export const geminiProtocol: ProtocolHandler = {
  provider: 'google',
  matches: (method, pathname) => method === 'POST' && ROUTE.test(pathname),
  // The SDK sends the key as a header; the REST docs also allow `?key=`.
  credential: (req) => req.headers.get('x-goog-api-key') ?? new URL(req.url).searchParams.get('key'),
  unauthorized: () => errorResponse(401, 'UNAUTHENTICATED', 'API key not valid. Please pass a valid API key.'),
  refuse: (status, message) => errorResponse(status, REFUSALS[status], message),
  modelOf: (url) => ROUTE.exec(url.pathname)?.[2] ?? null,
  handle: handleGenerate,
  upstream: {
    allowlist: geminiAllowlist,
    target: (url, baseUrl) => {
      const search = new URLSearchParams(url.search)
      search.delete('key')
      const query = search.toString()
      return baseUrl + url.pathname + (query ? `?${query}` : '')
    },
    authHeaders: (apiKey) => ({ 'x-goog-api-key': apiKey }),
    usage: upstreamUsage,
  },
}

async function handleGenerate(req: Request, ctx: ProtocolContext): Promise<Response> {
  const url = new URL(req.url)
  const [, , model = '', method] = ROUTE.exec(url.pathname) ?? []
  const raw = await req.text()
  const body = parseRequest(raw)
  if (typeof body === 'string') return errorResponse(400, 'INVALID_ARGUMENT', body)
  if (method === 'countTokens') return Response.json({ totalTokens: Math.ceil(raw.length / 4) })

  const reply = sideCallReply(body) ?? nextReply(toConversation(body.contents))
  if (reply.failure !== null) {
    // A 4xx, not a 5xx: the CLI retries server errors, and the script wants the turn to fail now.
    await stall(reply.sleepMs, req.signal)
    return errorResponse(400, 'INVALID_ARGUMENT', reply.failure)
  }
  const usage = withoutCacheWrites(replyUsage(reply, raw.length))
  // A reply always has a part, so the last chunk (finish reason, usage) always goes out.
  const offered = (body.tools ?? []).flatMap((t) => (t.functionDeclarations ?? []).flatMap((d) => (d.name ? [d.name] : [])))
  const parts = reply.parts.length > 0 ? toParts(reply, ctx.session.workspace, offered) : [{ text: '' }]
  const sent = () => ctx.meter({ model, ...usage })
  const responseId = randomId()
  const chunk = (partsOf: Json[], last: boolean): Json => ({
    candidates: [{ content: { role: 'model', parts: partsOf }, index: 0, ...(last ? { finishReason: 'STOP' } : {}) }],
    ...(last ? { usageMetadata: wireUsage(usage) } : {}),
    modelVersion: model,
    responseId,
  })
  if (method === 'generateContent') {
    await stall(reply.sleepMs, req.signal)
    sent()
    return Response.json(chunk(parts, true))
  }
  // Chunks of one part each, text in pieces, as the API streams; the last carries the finish reason
  // and the usage, without which the CLI reports no token stats. Frames end in CRLF pairs.
  const streamed = parts.flatMap(pieces)
  return sseResponse(
    req.signal,
    async (out, gone) => {
      // Keepalives while stalled, so a long stall is not an idle connection (the relay closes those).
      await stall(reply.sleepMs, gone, () => out.blank())
      streamed.forEach((part, i) => out.send(chunk([part], i === streamed.length - 1)))
      sent()
    },
    '\r\n',
  )
}

/** A text part split at its first space, so clients must join streamed text as they do for real. */
function pieces(part: Json): Json[] {
  const cut = typeof part.text === 'string' && part.thought !== true ? part.text.indexOf(' ') : -1
  if (cut < 0) return [part]
  const text = part.text as string
  return [{ text: text.slice(0, cut + 1) }, { text: text.slice(cut + 1) }]
}

/**
 * Calls without tools are the CLI talking to itself (router, summary), not the agent loop. A JSON
 * request gets an object conforming to its schema; any other a one-line summary of the user's ask.
 */
function sideCallReply(body: GenerateRequest): Reply | null {
  const offersTools = (body.tools ?? []).some((t) => (t.functionDeclarations ?? []).length > 0)
  if (offersTools) return null
  const config = body.generationConfig ?? {}
  const schema = config.responseJsonSchema ?? config.responseSchema
  if (config.responseMimeType === 'application/json' && isObject(schema)) {
    return { parts: [{ type: 'text', text: JSON.stringify(sampleOf(schema)) }], failure: null, sleepMs: 0, usage: null }
  }
  return { parts: [{ type: 'text', text: summaryOf(body.contents) }], failure: null, sleepMs: 0, usage: null }
}

/** The first line the user wrote, as the session-summary prompt quotes it (`User: …`), at most 80 characters. */
function summaryOf(contents: Content[]): string {
  const text = contents.flatMap((c) => (c.parts ?? []).map((p) => (typeof p.text === 'string' ? p.text : ''))).join('\n')
  const quoted = /^User: (.+)$/m.exec(text)?.[1]
  const line = (quoted ?? text.trim().split('\n')[0] ?? '').trim()
  return line.length > 80 ? line.slice(0, 80) : line || 'Scripted session'
}

/**
 * A value conforming to a response schema (JSON Schema or Gemini's OpenAPI subset with upper-case
 * types). Numbers take the middle of their range, so a 1-100 "complexity score" is 50, a sensible
 * answer for the model router.
 */
export function sampleOf(schema: Json): unknown {
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[0]
  const type = String(
    Array.isArray(schema.type) ? schema.type[0] : (schema.type ?? (isObject(schema.properties) ? 'object' : 'string')),
  ).toLowerCase()
  switch (type) {
    case 'object': {
      const properties = isObject(schema.properties) ? schema.properties : {}
      return Object.fromEntries(Object.entries(properties).map(([key, sub]) => [key, isObject(sub) ? sampleOf(sub) : null]))
    }
    case 'array': {
      const count = typeof schema.minItems === 'number' ? schema.minItems : 0
      return Array.from({ length: count }, () => (isObject(schema.items) ? sampleOf(schema.items) : null))
    }
    case 'integer':
    case 'number': {
      const min = typeof schema.minimum === 'number' ? schema.minimum : 1
      const max = typeof schema.maximum === 'number' ? schema.maximum : min
      const middle = min + (max - min) / 2
      return type === 'integer' ? Math.ceil(middle) : middle
    }
    case 'boolean':
      return false
    case 'null':
      return null
    default:
      return 'scripted'
  }
}

/**
 * Maps contents to the scripted model's view. The CLI puts its `<session_context>` into the first
 * user turn beside the prompt; such wholly wrapped text parts are not the user speaking.
 */
function toConversation(contents: Content[]): ConversationEntry[] {
  const entries: ConversationEntry[] = []
  for (const content of contents) {
    const parts = content.parts ?? []
    if (content.role === 'model') {
      entries.push({ role: 'assistant' })
      continue
    }
    const texts = parts
      .filter((p) => typeof p.text === 'string' && p.thought !== true && p.text.trim() !== '' && !isInjectedText(p.text))
      .map((p) => p.text as string)
    if (texts.length > 0) entries.push({ role: 'user', text: texts.join('\n') })
    else if (parts.some((p) => isObject(p.functionResponse))) entries.push({ role: 'tool' })
  }
  return entries
}

/** Renders a reply as Gemini parts, with the Gemini CLI's shell and file-write tools. */
function toParts(reply: Reply, workspace: string, offered: string[]): Json[] {
  return reply.parts.map((part): Json => {
    switch (part.type) {
      case 'thinking':
        return { text: part.text, thought: true }
      case 'text':
        return { text: part.text }
      case 'bash':
        return { functionCall: { name: 'run_shell_command', args: { command: part.command, description: describeCommand(part.command) } } }
      case 'write':
        return { functionCall: { name: 'write_file', args: { file_path: posix.resolve(workspace, part.path), content: part.content } } }
      case 'artifact':
        return {
          functionCall: {
            name: 'write_file',
            args: { file_path: posix.join(workspace, '.agentd/artifacts', part.name), content: part.content },
          },
        }
      case 'structured':
        return { text: JSON.stringify(part.value) }
      case 'mcp': {
        const name = mcpToolName(offered, part.server, part.tool)
        return name ? { functionCall: { name, args: part.input } } : { text: `(no tool ${part.tool} of ${part.server} was offered)` }
      }
    }
  })
}

/** Gemini counts cached tokens inside `promptTokenCount`; agentd meters uncached input separately. */
function wireUsage(u: TokenCounts): Json {
  const prompt = u.input + u.cacheRead
  return {
    promptTokenCount: prompt,
    candidatesTokenCount: u.output,
    totalTokenCount: prompt + u.output,
    ...(u.cacheRead > 0 ? { cachedContentTokenCount: u.cacheRead } : {}),
  }
}

/** Counts from `usageMetadata`; in a stream each chunk may carry it and the last one is final. */
function upstreamUsage(payload: unknown, sofar: Metered | null): Metered | null {
  if (!isObject(payload) || !isObject(payload.usageMetadata)) return sofar
  const u = payload.usageMetadata
  const n = (v: unknown) => (typeof v === 'number' ? v : 0)
  const cached = n(u.cachedContentTokenCount)
  return {
    input: n(u.promptTokenCount) - cached,
    output: n(u.candidatesTokenCount) + n(u.thoughtsTokenCount),
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

function parseRequest(raw: string): GenerateRequest | string {
  const body = parseJson(raw)
  if (!isObject(body)) return 'Invalid JSON payload received.'
  if (
    !Array.isArray(body.contents) ||
    !body.contents.every((c) => isObject(c) && (c.parts === undefined || (Array.isArray(c.parts) && c.parts.every(isObject))))
  ) {
    return 'contents: must be an array of {role, parts}'
  }
  return body as unknown as GenerateRequest
}

function errorResponse(code: number, status: string, message: string): Response {
  return Response.json({ error: { code, message, status } }, { status: code })
}
