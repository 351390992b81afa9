/**
 * What the gateway forwards to a real provider (contract section 11), per wire protocol: the
 * request fields and headers each bundled CLI was seen to send (docs/decisions.md, "What the
 * gateway forwards"), and nothing the provider would act on beyond answering the model call:
 *
 * - Options outside the lists are removed: provider-side tools (web search and fetch, code
 *   execution, server-side MCP, computer use…), price tiers, another organization or project, and
 *   any field or header no CLI sends. The request still means what it meant, minus the extra.
 * - Content that is not inline is refused (400): references to objects stored on the operator's
 *   account (files, containers, earlier responses, conversations, stored prompts, cached content)
 *   and URLs the provider would fetch. Dropping those would change what the model is asked.
 *
 * The scripted model never sees these rules: its requests never leave agentd.
 */
import { isObject } from '../domain/values'

type Json = Record<string, unknown>

/** Why a request is not forwarded; the gateway answers it with the protocol's 400. */
export class Refused extends Error {}

export interface Allowlist {
  /** Request headers forwarded (lower case). Credentials are never among them: the provider key is added. */
  readonly headers: ReadonlySet<string>
  /** A forwarded header's value, for headers that list options (`anthropic-beta`); null drops it. */
  headerValue?(name: string, value: string): string | null
  /** Query parameters forwarded. */
  readonly query: ReadonlySet<string>
  /** The body as forwarded; throws Refused for content that may not leave. */
  body(body: Json, url: URL): Json
}

/**
 * Reply headers returned to the sandbox: what a CLI reads to stream and to retry. The rest describe
 * the operator's account (organization, project, rate limits, request ids, cookies) or the hop.
 */
export const REPLY_HEADERS: ReadonlySet<string> = new Set([
  'content-type',
  'cache-control',
  'retry-after',
  'retry-after-ms',
  'x-should-retry',
  'openai-model',
  'x-reasoning-included',
])

/** The request headers to send upstream: `allow`ed ones only, each as its allowlist rewrites it. */
export function forwardedHeaders(from: Headers, allow: Allowlist): Headers {
  const headers = new Headers()
  from.forEach((value, name) => {
    if (!allow.headers.has(name)) return
    const kept = allow.headerValue ? allow.headerValue(name, value) : value
    if (kept !== null) headers.set(name, kept)
  })
  return headers
}

/** The gateway URL's query with only the `allow`ed parameters. */
export function forwardedQuery(url: URL, allow: Allowlist): string {
  const query = new URLSearchParams()
  for (const [name, value] of url.searchParams) if (allow.query.has(name)) query.append(name, value)
  const text = query.toString()
  return text ? `?${text}` : ''
}

/** `value` with only the `keys` it has of them. */
function pick(value: Json, keys: readonly string[]): Json {
  const out: Json = {}
  for (const key of keys) if (value[key] !== undefined) out[key] = value[key]
  return out
}

/** Throws for the first of `keys` the body has: each names a stored object of the operator's account. */
function refuseStored(body: Json, keys: readonly string[]): void {
  for (const key of keys) {
    if (body[key] !== undefined)
      throw new Refused(`agentd gateway: \`${key}\` refers to an object stored on the provider account; only inline content is forwarded`)
  }
}

/** `value` as an array of objects, or throws naming `path`. */
function objects(value: unknown, path: string): Json[] {
  if (!Array.isArray(value) || !value.every(isObject)) throw new Refused(`agentd gateway: \`${path}\` must be an array of objects`)
  return value
}

/** Sets `key` to `list` when anything is left in it, else removes it. */
function keepList(out: Json, key: string, list: unknown[]): void {
  if (list.length > 0) out[key] = list
  else delete out[key]
}

// ---------------------------------------------------------------------------------------------
// Anthropic Messages (Claude Code)

/** The betas Claude Code sends (2.1.197, every model and option agentd runs it with) but `fast-mode`, a price tier. */
const ANTHROPIC_BETAS = new Set([
  'claude-code-20250219',
  'interleaved-thinking-2025-05-14',
  'thinking-token-count-2026-05-13',
  'context-management-2025-06-27',
  'prompt-caching-scope-2026-01-05',
  'mid-conversation-system-2026-04-07',
  'effort-2025-11-24',
])

const ANTHROPIC_FIELDS = [
  'model',
  'messages',
  'system',
  'max_tokens',
  'stream',
  'metadata',
  'stop_sequences',
  'temperature',
  'top_p',
  'top_k',
  'tools',
  'tool_choice',
  'thinking',
  'context_management',
  'output_config',
]
/**
 * Client tools: the CLI runs them. A `type` of anything else is the provider's own
 * (`web_search_…`, `code_execution_…`, `mcp_toolset`…).
 */
const ANTHROPIC_TOOL_FIELDS = ['type', 'name', 'description', 'input_schema', 'cache_control', 'strict']
const ANTHROPIC_BLOCKS = new Set(['text', 'image', 'document', 'thinking', 'redacted_thinking', 'tool_use', 'tool_result'])
/** Inline sources only: `url` is fetched by the provider, `file` is the operator's Files API. */
const ANTHROPIC_SOURCES = new Set(['base64', 'text', 'content'])

export const anthropicAllowlist: Allowlist = {
  headers: new Set([
    'content-type',
    'accept',
    'user-agent',
    'anthropic-version',
    'anthropic-beta',
    'x-app',
    'x-claude-code-session-id',
    ...['arch', 'lang', 'os', 'package-version', 'retry-count', 'runtime', 'runtime-version', 'timeout'].map(
      (name) => `x-stainless-${name}`,
    ),
  ]),
  headerValue: (name, value) => {
    if (name !== 'anthropic-beta') return value
    const betas = value
      .split(',')
      .map((beta) => beta.trim())
      .filter((beta) => ANTHROPIC_BETAS.has(beta))
    return betas.length > 0 ? betas.join(',') : null
  },
  query: new Set(['beta']),
  body(body) {
    refuseStored(body, ['container'])
    const out = pick(body, ANTHROPIC_FIELDS)
    if (out.tools !== undefined) {
      keepList(
        out,
        'tools',
        objects(out.tools, 'tools')
          .filter((tool) => tool.type === undefined || tool.type === 'custom')
          .map((tool) => pick(tool, ANTHROPIC_TOOL_FIELDS)),
      )
    }
    if (isObject(out.metadata)) out.metadata = pick(out.metadata, ['user_id'])
    if (isObject(out.output_config)) out.output_config = pick(out.output_config, ['effort', 'format'])
    if (isObject(out.context_management)) {
      const edits = Array.isArray(out.context_management.edits)
        ? out.context_management.edits.filter((e) => isObject(e) && /^clear_(thinking|tool_uses)_\d{8}$/.test(String(e.type)))
        : []
      if (edits.length > 0) out.context_management = { edits }
      else delete out.context_management
    }
    if (Array.isArray(out.system)) anthropicBlocks(out.system, 'system', new Set(['text']))
    for (const [i, message] of objects(out.messages ?? [], 'messages').entries()) {
      if (Array.isArray(message.content)) anthropicBlocks(message.content, `messages[${i}].content`, ANTHROPIC_BLOCKS)
    }
    return out
  },
}

/** Checks content blocks (and the blocks inside tool results and documents): inline content of known types only. */
function anthropicBlocks(blocks: unknown[], path: string, allowed: ReadonlySet<string>): void {
  for (const [i, block] of objects(blocks, path).entries()) {
    const at = `${path}[${i}]`
    if (!allowed.has(String(block.type)))
      throw new Refused(`agentd gateway: \`${at}\` is a block of type ${JSON.stringify(block.type)}, which is not forwarded`)
    if (block.source !== undefined) {
      const type = isObject(block.source) ? block.source.type : undefined
      if (!ANTHROPIC_SOURCES.has(String(type)))
        throw new Refused(
          `agentd gateway: \`${at}.source\` of type ${JSON.stringify(type)} is not inline content (url and file sources are not forwarded)`,
        )
      if (isObject(block.source) && Array.isArray(block.source.content))
        anthropicBlocks(block.source.content, `${at}.source.content`, new Set(['text', 'image']))
    }
    if (block.type === 'tool_result' && Array.isArray(block.content))
      anthropicBlocks(block.content, `${at}.content`, new Set(['text', 'image', 'document']))
  }
}

// ---------------------------------------------------------------------------------------------
// OpenAI Responses (Codex)

const OPENAI_FIELDS = [
  'model',
  'input',
  'instructions',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'reasoning',
  'stream',
  'stream_options',
  'include',
  'prompt_cache_key',
  'client_metadata',
  'text',
  'max_output_tokens',
  'temperature',
  'top_p',
  'truncation',
]
/** Tools the CLI runs itself; `tool_search` only as Codex offers it, run by the client. */
const OPENAI_TOOLS = new Set(['function', 'custom'])
/** What Codex's conversation history may hold (its ResponseItem kinds); `item_reference` and the like are not among them. */
const OPENAI_ITEMS = new Set([
  'message',
  'reasoning',
  'function_call',
  'function_call_output',
  'custom_tool_call',
  'custom_tool_call_output',
  'local_shell_call',
  'local_shell_call_output',
  'tool_search_call',
  'tool_search_output',
  'web_search_call',
  'image_generation_call',
  'compaction',
])

export const openaiAllowlist: Allowlist = {
  headers: new Set([
    'content-type',
    'accept',
    'user-agent',
    'originator',
    'session-id',
    'thread-id',
    'x-client-request-id',
    'x-codex-beta-features',
    'x-codex-turn-metadata',
    'x-codex-window-id',
    'x-codex-turn-state',
  ]),
  query: new Set(),
  body(body) {
    refuseStored(body, ['previous_response_id', 'conversation', 'prompt'])
    const out = pick(body, OPENAI_FIELDS)
    // Absent, the API stores the response on the operator's account (its default is true).
    out.store = false
    if (Array.isArray(out.include))
      keepList(
        out,
        'include',
        out.include.filter((what) => what === 'reasoning.encrypted_content'),
      )
    if (out.tools !== undefined) keepList(out, 'tools', objects(out.tools, 'tools').flatMap(openaiTool))
    if (Array.isArray(out.input)) {
      for (const [i, item] of objects(out.input, 'input').entries()) {
        const type = item.type ?? (item.role !== undefined ? 'message' : undefined)
        if (!OPENAI_ITEMS.has(String(type)))
          throw new Refused(`agentd gateway: \`input[${i}]\` is an item of type ${JSON.stringify(type)}, which is not forwarded`)
        inlineOnly(item, `input[${i}]`)
      }
    }
    return out
  },
}

function openaiTool(tool: Json): Json[] {
  if (OPENAI_TOOLS.has(String(tool.type))) return [tool]
  if (tool.type === 'tool_search' && tool.execution === 'client') return [tool]
  if (tool.type === 'namespace' && Array.isArray(tool.tools)) {
    const inner = tool.tools.filter((t) => isObject(t) && OPENAI_TOOLS.has(String(t.type)))
    return inner.length > 0 ? [{ ...tool, tools: inner }] : []
  }
  return []
}

/**
 * Refuses a reference anywhere in an input item: a stored file (`file_id`), or a URL the provider
 * would fetch (`image_url` or `file_url` other than a `data:` URL).
 */
function inlineOnly(value: unknown, path: string): void {
  if (Array.isArray(value)) return value.forEach((v, i) => inlineOnly(v, `${path}[${i}]`))
  if (!isObject(value)) return
  if (value.file_id !== undefined)
    throw new Refused(
      `agentd gateway: \`${path}.file_id\` refers to a file stored on the provider account; only inline content is forwarded`,
    )
  for (const key of ['image_url', 'file_url']) {
    const url = isObject(value[key]) ? (value[key] as Json).url : value[key]
    if (url !== undefined && !(typeof url === 'string' && url.startsWith('data:'))) {
      throw new Refused(`agentd gateway: \`${path}.${key}\` is not a data: URL; the provider does not fetch URLs for a sandbox`)
    }
  }
  for (const [key, inner] of Object.entries(value)) if (typeof inner === 'object') inlineOnly(inner, `${path}.${key}`)
}

// ---------------------------------------------------------------------------------------------
// Gemini generateContent (Gemini CLI)

const GEMINI_FIELDS = ['contents', 'systemInstruction', 'tools', 'toolConfig', 'generationConfig', 'safetySettings']
const GEMINI_GENERATION = [
  'temperature',
  'topP',
  'topK',
  'candidateCount',
  'maxOutputTokens',
  'stopSequences',
  'presencePenalty',
  'frequencyPenalty',
  'seed',
  'responseMimeType',
  'responseSchema',
  'responseJsonSchema',
  'thinkingConfig',
]
/** Inline parts only: `fileData` names a stored file or a URL, executable code is the provider's code execution. */
const GEMINI_PARTS = new Set(['text', 'thought', 'thoughtSignature', 'inlineData', 'functionCall', 'functionResponse'])

export const geminiAllowlist: Allowlist = {
  headers: new Set(['content-type', 'accept', 'user-agent', 'x-goog-api-client']),
  query: new Set(['alt']),
  body(body, url) {
    if (url.pathname.endsWith(':countTokens')) {
      const out = pick(body, ['contents', 'generateContentRequest'])
      if (out.contents !== undefined) geminiContents(out.contents, 'contents')
      if (isObject(out.generateContentRequest))
        out.generateContentRequest = { ...pick(out.generateContentRequest, ['model']), ...geminiGenerate(out.generateContentRequest) }
      return out
    }
    return geminiGenerate(body)
  },
}

function geminiGenerate(body: Json): Json {
  refuseStored(body, ['cachedContent'])
  const out = pick(body, GEMINI_FIELDS)
  // Only function declarations: googleSearch, codeExecution, urlContext, fileSearch, googleMaps… run at the provider.
  if (out.tools !== undefined)
    keepList(
      out,
      'tools',
      objects(out.tools, 'tools').flatMap((tool) =>
        tool.functionDeclarations !== undefined ? [pick(tool, ['functionDeclarations'])] : [],
      ),
    )
  if (isObject(out.toolConfig)) {
    const config = pick(out.toolConfig, ['functionCallingConfig'])
    if (Object.keys(config).length > 0) out.toolConfig = config
    else delete out.toolConfig
  }
  if (isObject(out.generationConfig)) out.generationConfig = pick(out.generationConfig, GEMINI_GENERATION)
  geminiContents(out.contents ?? [], 'contents')
  if (isObject(out.systemInstruction)) geminiContents([out.systemInstruction], 'systemInstruction')
  return out
}

function geminiContents(contents: unknown, path: string): void {
  for (const [i, content] of objects(contents, path).entries()) {
    for (const [j, part] of objects(content.parts ?? [], `${path}[${i}].parts`).entries()) {
      const at = `${path}[${i}].parts[${j}]`
      const other = Object.keys(part).find((key) => !GEMINI_PARTS.has(key))
      if (other) throw new Refused(`agentd gateway: \`${at}.${other}\` is not forwarded (parts carry inline content only)`)
      // A function's response may carry parts of its own (multimodal results).
      if (isObject(part.functionResponse) && part.functionResponse.parts !== undefined)
        geminiContents([{ parts: part.functionResponse.parts }], `${at}.functionResponse`)
    }
  }
}
