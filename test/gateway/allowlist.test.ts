/**
 * What the gateway forwards to a real provider (src/gateway/allowlist.ts) and how many model
 * requests a session may have in flight. The provider is a local recorder; requests are shaped as
 * each bundled CLI sends them (captured from Claude Code 2.1.197, Codex 0.169.0 and Gemini CLI
 * 0.61.0, long texts and tool lists cut short). The real CLIs through the filter, from a sandbox:
 * test/security/gateway-passthrough.test.ts.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { MAX_MODEL_REQUESTS_IN_FLIGHT, startGateway, type Gateway, type Providers } from '../../src/gateway/gateway'
import { poll } from '../helpers/poll'

const KEY = 'agw_allowlist_session'
const OTHER_KEY = 'agw_allowlist_other'
const seen: { path: string; headers: Record<string, string>; body: any }[] = []
let provider: ReturnType<typeof Bun.serve>
let gateway: Gateway
/** Model requests of session `mine` the gateway has taken in (logged as it counts them in flight). */
let arrived = 0

beforeAll(() => {
  provider = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const url = new URL(req.url)
      seen.push({ path: url.pathname + url.search, headers: Object.fromEntries(req.headers), body: await req.json() })
      return Response.json(
        { ok: true },
        {
          headers: {
            'openai-organization': 'org-operator',
            'anthropic-organization-id': 'operator',
            'request-id': 'req_1',
            'x-ratelimit-remaining-tokens': '9',
            'retry-after': '3',
            'x-should-retry': 'false',
          },
        },
      )
    },
  })
  const base = `http://127.0.0.1:${provider.port}`
  const providers: Providers = {
    anthropic: { baseUrl: base, apiKey: 'sk-ant' },
    openai: { baseUrl: `${base}/v1`, apiKey: 'sk-oai' },
    google: { baseUrl: base, apiKey: 'sk-goog' },
  }
  gateway = startGateway({
    resolve: (token) =>
      token === KEY
        ? { sessionId: 'mine', workspace: '/workspace' }
        : token === OTHER_KEY
          ? { sessionId: 'other', workspace: '/workspace' }
          : null,
    providers,
    onLog: (session, line) => {
      if (session.sessionId === 'mine' && /gateway: POST \S+\n$/.test(line)) arrived++
    },
  })
})
afterAll(async () => {
  provider.stop(true)
  await gateway.stop()
})

async function send(path: string, headers: Record<string, string>, body: unknown) {
  seen.length = 0
  const res = await fetch(gateway.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  })
  return { res, text: await res.text(), forwarded: seen[0] }
}

/** Claude Code's last request of a turn: thinking, a tool call and its result, a mid-conversation system message. */
const claudeRequest = {
  model: 'claude-opus-4-8',
  messages: [
    {
      role: 'user',
      content: [
        { type: 'text', text: '<system-reminder>…' },
        { type: 'text', text: 'Scripted task', cache_control: { type: 'ephemeral' } },
      ],
    },
    { role: 'system', content: 'Available agent types…' },
    {
      role: 'assistant',
      content: [
        { type: 'thinking', thinking: 'plan the listing', signature: 'sig' },
        { type: 'text', text: 'Looking around' },
        { type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls', description: 'Run ls' } },
      ],
    },
    {
      role: 'user',
      content: [{ tool_use_id: 'toolu_1', type: 'tool_result', content: 'bin', is_error: false, cache_control: { type: 'ephemeral' } }],
    },
  ],
  system: [
    { type: 'text', text: 'x-anthropic-billing-header: cc…' },
    { type: 'text', text: 'You are a Claude agent…', cache_control: { type: 'ephemeral' } },
  ],
  tools: [
    {
      name: 'Bash',
      description: 'Executes a bash command',
      input_schema: {
        $schema: 'https://json-schema.org/draft/2020-12/schema',
        type: 'object',
        properties: { command: { type: 'string' } },
        required: ['command'],
        additionalProperties: false,
      },
    },
  ],
  metadata: { user_id: '{"device_id":"d","account_uuid":"","session_id":"s"}' },
  max_tokens: 64000,
  thinking: { type: 'adaptive' },
  context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
  output_config: { effort: 'high' },
  stream: false,
}
const CLAUDE_BETAS =
  'claude-code-20250219,interleaved-thinking-2025-05-14,thinking-token-count-2026-05-13,context-management-2025-06-27,prompt-caching-scope-2026-01-05,mid-conversation-system-2026-04-07,effort-2025-11-24'
const claudeHeaders = {
  'x-api-key': KEY,
  'anthropic-version': '2023-06-01',
  'anthropic-beta': CLAUDE_BETAS,
  'anthropic-dangerous-direct-browser-access': 'true',
  'x-app': 'cli',
  'user-agent': 'claude-cli/2.1.197 (external, sdk-cli)',
  'x-claude-code-session-id': 's',
  'x-stainless-lang': 'js',
  'x-stainless-retry-count': '0',
}

/** Codex's last request of a turn: developer messages, a reasoning item, a call and its output; its own web_search tool. */
const codexRequest = {
  model: 'gpt-5.5',
  stream: false,
  input: [
    { type: 'message', id: 'msg_1', role: 'developer', content: [{ type: 'input_text', text: 'You are Codex…' }] },
    { type: 'message', id: 'msg_2', role: 'user', content: [{ type: 'input_text', text: 'Scripted task' }] },
    { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'plan' }], content: null, encrypted_content: 'enc' },
    {
      type: 'message',
      id: 'msg_3',
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text: 'Looking around', annotations: [] }],
    },
    { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'exec_command', arguments: '{"cmd":"ls"}', status: 'completed' },
    { type: 'function_call_output', id: 'fco_1', call_id: 'call_1', output: 'Process exited with code 0' },
  ],
  tools: [
    {
      type: 'function',
      name: 'exec_command',
      description: 'Runs a command',
      strict: false,
      parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'], additionalProperties: false },
    },
    {
      type: 'custom',
      name: 'apply_patch',
      description: 'Patches files',
      format: { type: 'grammar', syntax: 'lark', definition: 'start: begin_patch' },
    },
    {
      type: 'namespace',
      name: 'mcp__docs',
      description: 'docs tools',
      tools: [{ type: 'function', name: 'search', description: 'search', strict: false, parameters: { type: 'object', properties: {} } }],
    },
    {
      type: 'tool_search',
      execution: 'client',
      description: 'Tool discovery',
      parameters: { type: 'object', properties: { query: { type: 'string' } } },
    },
    { type: 'web_search', external_web_access: true, search_content_types: ['text', 'image'] },
  ],
  tool_choice: 'auto',
  parallel_tool_calls: true,
  reasoning: { effort: 'high', summary: 'auto' },
  store: false,
  include: ['reasoning.encrypted_content'],
  prompt_cache_key: 'thread',
  text: {
    verbosity: 'low',
    format: {
      type: 'json_schema',
      strict: true,
      name: 'codex_output_schema',
      schema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false },
    },
  },
  client_metadata: { session_id: 'thread', turn_id: 'turn' },
  service_tier: 'priority',
}
const codexHeaders = {
  authorization: `Bearer ${KEY}`,
  originator: 'codex_exec',
  'user-agent': 'codex_exec/0.169.0',
  'session-id': 'thread',
  'thread-id': 'thread',
  'x-client-request-id': 'thread',
  'x-codex-beta-features': 'remote_compaction_v2',
  'x-codex-turn-metadata': '{"installation_id":"i"}',
  'x-codex-window-id': 'w',
}

/** The Gemini CLI's request after a shell call. */
const geminiRequest = {
  contents: [
    { role: 'user', parts: [{ text: '<session_context>…' }, { text: 'Scripted task' }] },
    {
      role: 'model',
      parts: [
        { text: 'Looking around' },
        { functionCall: { id: 'c1', name: 'run_shell_command', args: { command: 'ls', description: 'Run ls' } }, thoughtSignature: 'skip' },
      ],
    },
    { role: 'user', parts: [{ functionResponse: { id: 'c1', name: 'run_shell_command', response: { output: 'bin' } } }] },
  ],
  systemInstruction: { role: 'user', parts: [{ text: 'You are Gemini CLI…' }] },
  tools: [
    {
      functionDeclarations: [
        {
          name: 'run_shell_command',
          description: 'Runs a shell command',
          parametersJsonSchema: { type: 'object', properties: { command: { type: 'string' } } },
        },
      ],
    },
  ],
  generationConfig: { temperature: 1, topP: 0.95, topK: 64, thinkingConfig: { includeThoughts: true, thinkingLevel: 'HIGH' } },
}
const geminiHeaders = {
  'x-goog-api-key': KEY,
  'x-goog-api-client': 'google-genai-sdk/1.30.0 gl-node/v20.20.2',
  'user-agent': 'GeminiCLI-tui/0.61.0',
  'accept-language': '*',
  'sec-fetch-mode': 'cors',
}

describe('a request as each CLI sends it', () => {
  test('Claude Code: forwarded whole, without the browser-access header; the reply keeps only what a CLI reads', async () => {
    const { res, forwarded } = await send('/v1/messages?beta=true', claudeHeaders, claudeRequest)
    expect(res.status).toBe(200)
    expect(forwarded!.path).toBe('/v1/messages?beta=true')
    expect(forwarded!.body).toEqual(claudeRequest)
    const { 'x-api-key': _, 'anthropic-dangerous-direct-browser-access': __, ...kept } = claudeHeaders
    for (const [name, value] of Object.entries(kept)) expect(forwarded!.headers[name], name).toBe(value)
    expect(forwarded!.headers['x-api-key']).toBe('sk-ant')
    expect(forwarded!.headers['anthropic-dangerous-direct-browser-access']).toBeUndefined()
    expect([...res.headers.keys()].filter((name) => !['content-type', 'content-length', 'date'].includes(name)).sort()).toEqual([
      'retry-after',
      'x-should-retry',
    ])
  })

  test('Claude Code in fast mode: its `speed` and the fast-mode beta are a price tier, removed', async () => {
    const { res, forwarded } = await send(
      '/v1/messages?beta=true',
      { ...claudeHeaders, 'anthropic-beta': `${CLAUDE_BETAS},fast-mode-2026-02-01` },
      { ...claudeRequest, speed: 'fast' },
    )
    expect(res.status).toBe(200)
    expect(forwarded!.body).toEqual(claudeRequest)
    expect(forwarded!.headers['anthropic-beta']).toBe(CLAUDE_BETAS)
  })

  test('Codex: forwarded but for its priority tier and its provider-side web_search tool', async () => {
    const { res, forwarded } = await send('/v1/responses', codexHeaders, codexRequest)
    expect(res.status).toBe(200)
    expect(forwarded!.path).toBe('/v1/responses')
    const { service_tier: _, ...rest } = codexRequest
    expect(forwarded!.body).toEqual({ ...rest, tools: codexRequest.tools.slice(0, 4) })
    const { authorization: __, ...kept } = codexHeaders
    for (const [name, value] of Object.entries(kept)) expect(forwarded!.headers[name], name).toBe(value)
    expect(forwarded!.headers.authorization).toBe('Bearer sk-oai')
  })

  test('Gemini CLI: forwarded whole; its key leaves the query, only `alt` stays', async () => {
    const { res, forwarded } = await send(
      `/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse&key=${KEY}&$fields=x`,
      geminiHeaders,
      geminiRequest,
    )
    expect(res.status).toBe(200)
    expect(forwarded!.path).toBe('/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse')
    expect(forwarded!.body).toEqual(geminiRequest)
    expect(forwarded!.headers['x-goog-api-client']).toBe(geminiHeaders['x-goog-api-client'])
    expect(forwarded!.headers['x-goog-api-key']).toBe('sk-goog')
    expect(forwarded!.headers['sec-fetch-mode']).toBeUndefined()
  })
})

describe('what is refused, in each protocol’s error shape', () => {
  const cases: [string, string, Record<string, string>, unknown, (body: any) => unknown][] = [
    ['anthropic container', '/v1/messages', { 'x-api-key': KEY }, { ...claudeRequest, container: 'container_1' }, (b) => b.error.type],
    [
      'anthropic redacted tool result of a server tool',
      '/v1/messages',
      { 'x-api-key': KEY },
      {
        ...claudeRequest,
        messages: [{ role: 'assistant', content: [{ type: 'server_tool_use', id: 's', name: 'web_search', input: {} }] }],
      },
      (b) => b.error.type,
    ],
    [
      'anthropic a document from a URL inside a tool result',
      '/v1/messages',
      { 'x-api-key': KEY },
      {
        ...claudeRequest,
        messages: [
          {
            role: 'user',
            content: [
              {
                type: 'tool_result',
                tool_use_id: 't',
                content: [{ type: 'document', source: { type: 'url', url: 'https://x.test/a.pdf' } }],
              },
            ],
          },
        ],
      },
      (b) => b.error.type,
    ],
    [
      'openai a stored prompt',
      '/v1/responses',
      { authorization: `Bearer ${KEY}` },
      { ...codexRequest, prompt: { id: 'pmpt_1' } },
      (b) => b.error.type,
    ],
    [
      'openai a file in a function output',
      '/v1/responses',
      { authorization: `Bearer ${KEY}` },
      { ...codexRequest, input: [{ type: 'function_call_output', call_id: 'c', output: [{ type: 'input_image', file_id: 'file-1' }] }] },
      (b) => b.error.type,
    ],
    [
      'gemini executable code',
      '/v1beta/models/gemini-3.1-pro-preview:generateContent',
      { 'x-goog-api-key': KEY },
      { ...geminiRequest, contents: [{ role: 'model', parts: [{ executableCode: { language: 'PYTHON', code: 'print(1)' } }] }] },
      (b) => b.error.status,
    ],
    [
      'gemini a file in a function response',
      '/v1beta/models/gemini-3.1-pro-preview:generateContent',
      { 'x-goog-api-key': KEY },
      {
        ...geminiRequest,
        contents: [
          { role: 'user', parts: [{ functionResponse: { name: 'f', response: {}, parts: [{ fileData: { fileUri: 'files/1' } }] } }] },
        ],
      },
      (b) => b.error.status,
    ],
  ]
  for (const [label, path, headers, body, kind] of cases) {
    test(label, async () => {
      const { res, text, forwarded } = await send(path, headers, body)
      expect(res.status).toBe(400)
      expect(kind(JSON.parse(text))).toBe(path.startsWith('/v1beta') ? 'INVALID_ARGUMENT' : 'invalid_request_error')
      expect(text).toContain('agentd gateway')
      expect(forwarded).toBeUndefined()
    })
  }
})

describe('model requests in flight per session', () => {
  const held = (text: string) => `${text}\n\`\`\`agentd-script\n[{"sleep": 1500}, {"answer": "held"}]\n\`\`\``
  const protocols = {
    anthropic: {
      ask: (key: string, text: string) =>
        [
          '/v1/messages',
          { 'x-api-key': key },
          { model: 'scripted', max_tokens: 8, stream: true, messages: [{ role: 'user', content: text }] },
        ] as const,
      error: (b: any) => b.error.type,
      type: 'rate_limit_error',
    },
    openai: {
      ask: (key: string, text: string) =>
        ['/v1/responses', { authorization: `Bearer ${key}` }, { model: 'scripted', stream: true, input: text }] as const,
      error: (b: any) => b.error.type,
      type: 'rate_limit_exceeded',
    },
    google: {
      ask: (key: string, text: string) =>
        [
          '/v1beta/models/scripted:streamGenerateContent?alt=sse',
          { 'x-goog-api-key': key },
          { contents: [{ role: 'user', parts: [{ text }] }], tools: [{ functionDeclarations: [{ name: 'run_shell_command' }] }] },
        ] as const,
      error: (b: any) => b.error.status,
      type: 'RESOURCE_EXHAUSTED',
    },
  }
  for (const [name, p] of Object.entries(protocols)) {
    test(`${name}: the 9th is refused at once with 429 and Retry-After; another session is served; an ended one frees its place`, async () => {
      const call = async (key: string, text: string) => {
        const [path, headers, body] = p.ask(key, text)
        return fetch(gateway.url + path, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify(body),
        })
      }
      arrived = 0
      const eight = Array.from({ length: MAX_MODEL_REQUESTS_IN_FLIGHT }, (_, i) => call(KEY, held(`hold ${i}`)))
      await poll('the 8 in flight', () => arrived === MAX_MODEL_REQUESTS_IN_FLIGHT)
      const started = performance.now()
      const ninth = await call(KEY, 'the ninth')
      expect(performance.now() - started).toBeLessThan(500)
      expect(ninth.status).toBe(429)
      expect(ninth.headers.get('retry-after')).toBe('2')
      expect(p.error(await ninth.json())).toBe(p.type)
      const other = await call(OTHER_KEY, 'another session')
      expect(other.status).toBe(200)
      await other.text()
      for (const reply of await Promise.all(eight)) {
        expect(reply.status).toBe(200)
        expect(await reply.text()).toContain('held')
      }
      const after = await call(KEY, 'after the eight')
      expect(after.status).toBe(200)
      await after.text()
    })
  }
})
