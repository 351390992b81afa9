/**
 * Attack: spend outside the meter through the model gateway (CONTRACT section 11). From inside a
 * sandbox, with its session's own gateway key, an agent asks the real provider for provider-side
 * tools (web search and fetch, code execution, a server-side MCP connector to any URL), a higher
 * price tier, another organization or project of the operator's, and objects stored on the
 * operator's account; and it reads what the provider's reply headers say about that account.
 *
 * The provider is a local stand-in for all three protocols, configured through AGENTD_CONFIG as an
 * operator would: it records every request that reaches it, answers with a scripted model behind it,
 * and puts account headers (organization, project, request ids, rate limits, a cookie) on every reply.
 * Each CLI runs a real session on a priced model of its provider (speed `fast` where the catalog
 * offers it) on bubblewrap: the turn must complete through the gateway's filter, its own requests
 * reach the provider without the priority tier and provider-side tools it asks for itself, and a
 * probe it runs (node, inside the sandbox, with the key the CLI holds) sends each forbidden field
 * and header. Stripped ones reach the provider without it; references to stored objects (and
 * content the provider would fetch from a URL) are refused with 400 and never reach it. The filter
 * is the gateway's, the same for every driver, so one isolating driver is enough here.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startGateway, type Gateway } from '../../src/gateway/gateway'
import type { TestApp } from '../helpers/app'
import { req } from '../helpers/http'
import { caller, script, securityApp, turnEnded } from './helpers'

const PROVIDER_KEY = 'sk-operator-provider-key'
type Provider = 'anthropic' | 'openai' | 'google'

/** What the stand-in puts on every reply: the operator's account, never the sandbox's business. */
const ACCOUNT_HEADERS: Record<string, string> = {
  'openai-organization': 'org-operator',
  'openai-project': 'proj_operator',
  'openai-processing-ms': '42',
  'anthropic-organization-id': '0f0e0d0c-operator',
  'anthropic-ratelimit-tokens-remaining': '123456',
  'x-ratelimit-remaining-requests': '4999',
  'request-id': 'req_operator',
  'x-request-id': 'req_operator',
  'set-cookie': '__cf_bm=operator; path=/',
  'cf-ray': '8f00operator-SJC',
  'x-goog-user-project': 'operator-project',
}

interface Seen {
  provider: Provider
  path: string
  headers: Record<string, string>
  body: any
}

/** One forbidden thing, as the probe sends it from the sandbox. */
interface Case {
  label: string
  path: string
  headers?: Record<string, string>
  body: Record<string, unknown>
  /** `strip`: answered, and the provider saw the request without it; `refuse`: 400, the provider saw nothing. */
  expect: 'strip' | 'refuse'
}

const MODELS = { anthropic: 'claude-opus-4-8', openai: 'gpt-5.5', google: 'gemini-3.1-pro-preview' } as const
const AGENTS = { anthropic: 'harness_1', openai: 'harness_2', google: 'harness_3' } as const
const marker = (label: string) => `probe:${label}`
/**
 * Whether `s` is a probe's request (for `label`): one whose text is the marker itself. The CLI's
 * own requests carry the probe's source too, but inside the prompt, where it is escaped JSON.
 */
const fromProbe = (s: Seen, label = '[a-z-]+') => new RegExp(`"probe:${label}"`).test(JSON.stringify(s.body))

const anthropic = (label: string, extra: Record<string, unknown> = {}, content?: unknown[]): Record<string, unknown> => ({
  model: MODELS.anthropic,
  max_tokens: 64,
  messages: [{ role: 'user', content: content ? [...content, { type: 'text', text: marker(label) }] : marker(label) }],
  ...extra,
})
const openai = (
  label: string,
  extra: Record<string, unknown> = {},
  content: unknown[] = [],
  items: unknown[] = [],
): Record<string, unknown> => ({
  model: MODELS.openai,
  store: false,
  input: [{ type: 'message', role: 'user', content: [...content, { type: 'input_text', text: marker(label) }] }, ...items],
  ...extra,
})
const google = (label: string, extra: Record<string, unknown> = {}, parts: unknown[] = []): Record<string, unknown> => ({
  contents: [{ role: 'user', parts: [...parts, { text: marker(label) }] }],
  ...extra,
})
const clientTool = { name: 'client_tool', description: 'a tool the CLI runs itself', input_schema: { type: 'object', properties: {} } }

const CASES: Record<Provider, Case[]> = {
  anthropic: [
    {
      label: 'server-tools',
      path: '/v1/messages',
      expect: 'strip',
      body: anthropic('server-tools', {
        tools: [
          { type: 'web_search_20250305', name: 'web_search', max_uses: 5 },
          { type: 'web_fetch_20250910', name: 'web_fetch' },
          { type: 'code_execution_20250825', name: 'code_execution' },
          { type: 'computer_20250124', name: 'computer', display_width_px: 1024, display_height_px: 768 },
          { type: 'mcp_toolset', mcp_server_name: 'attacker' },
          clientTool,
        ],
      }),
    },
    {
      label: 'mcp-servers',
      path: '/v1/messages',
      expect: 'strip',
      body: anthropic('mcp-servers', { mcp_servers: [{ type: 'url', url: 'https://attacker.example/mcp', name: 'attacker' }] }),
    },
    { label: 'service-tier', path: '/v1/messages', expect: 'strip', body: anthropic('service-tier', { service_tier: 'auto' }) },
    { label: 'speed', path: '/v1/messages', expect: 'strip', body: anthropic('speed', { speed: 'fast' }) },
    {
      label: 'headers',
      path: '/v1/messages',
      expect: 'strip',
      headers: {
        'anthropic-beta':
          'files-api-2025-04-14,mcp-client-2025-11-20,code-execution-2025-08-25,fast-mode-2026-02-01,interleaved-thinking-2025-05-14',
        'anthropic-organization-id': 'org-hostile',
        'openai-organization': 'org-hostile',
        'openai-project': 'proj-hostile',
        'x-goog-user-project': 'hostile-project',
      },
      body: anthropic('headers'),
    },
    { label: 'container', path: '/v1/messages', expect: 'refuse', body: anthropic('container', { container: 'container_011operator' }) },
    {
      label: 'file-id',
      path: '/v1/messages',
      expect: 'refuse',
      body: anthropic('file-id', {}, [{ type: 'document', source: { type: 'file', file_id: 'file_011operator' } }]),
    },
    {
      label: 'url-source',
      path: '/v1/messages',
      expect: 'refuse',
      body: anthropic('url-source', {}, [{ type: 'image', source: { type: 'url', url: 'https://attacker.example/x.png' } }]),
    },
  ],
  openai: [
    {
      label: 'hosted-tools',
      path: '/v1/responses',
      expect: 'strip',
      body: openai('hosted-tools', {
        tools: [
          { type: 'web_search' },
          { type: 'web_search_preview' },
          { type: 'file_search', vector_store_ids: ['vs_operator'] },
          { type: 'code_interpreter', container: { type: 'auto' } },
          { type: 'mcp', server_label: 'attacker', server_url: 'https://attacker.example/mcp', require_approval: 'never' },
          { type: 'image_generation' },
          { type: 'computer_use_preview', display_width: 1024, display_height: 768, environment: 'linux' },
          {
            type: 'function',
            name: 'client_tool',
            description: 'a tool the CLI runs itself',
            parameters: { type: 'object', properties: {} },
          },
        ],
      }),
    },
    { label: 'service-tier', path: '/v1/responses', expect: 'strip', body: openai('service-tier', { service_tier: 'priority' }) },
    { label: 'background', path: '/v1/responses', expect: 'strip', body: openai('background', { background: true }) },
    { label: 'store', path: '/v1/responses', expect: 'strip', body: openai('store', { store: true }) },
    {
      label: 'include',
      path: '/v1/responses',
      expect: 'strip',
      body: openai('include', { include: ['file_search_call.results', 'code_interpreter_call.outputs', 'reasoning.encrypted_content'] }),
    },
    {
      label: 'headers',
      path: '/v1/responses',
      expect: 'strip',
      headers: {
        'openai-organization': 'org-hostile',
        'openai-project': 'proj-hostile',
        'openai-beta': 'assistants=v2',
        'x-goog-user-project': 'hostile-project',
      },
      body: openai('headers'),
    },
    {
      label: 'previous-response',
      path: '/v1/responses',
      expect: 'refuse',
      body: openai('previous-response', { previous_response_id: 'resp_operator' }),
    },
    { label: 'conversation', path: '/v1/responses', expect: 'refuse', body: openai('conversation', { conversation: 'conv_operator' }) },
    { label: 'stored-prompt', path: '/v1/responses', expect: 'refuse', body: openai('stored-prompt', { prompt: { id: 'pmpt_operator' } }) },
    {
      label: 'item-reference',
      path: '/v1/responses',
      expect: 'refuse',
      body: openai('item-reference', {}, [], [{ type: 'item_reference', id: 'msg_operator' }]),
    },
    {
      label: 'file-id',
      path: '/v1/responses',
      expect: 'refuse',
      body: openai('file-id', {}, [{ type: 'input_file', file_id: 'file-operator' }]),
    },
    {
      label: 'image-url',
      path: '/v1/responses',
      expect: 'refuse',
      body: openai('image-url', {}, [{ type: 'input_image', image_url: 'https://attacker.example/x.png' }]),
    },
  ],
  google: [
    {
      label: 'provider-tools',
      path: `/v1beta/models/${MODELS.google}:generateContent`,
      expect: 'strip',
      body: google('provider-tools', {
        tools: [
          { googleSearch: {} },
          { googleSearchRetrieval: {} },
          { codeExecution: {} },
          { urlContext: {} },
          { fileSearch: { fileSearchStoreNames: ['fileSearchStores/operator'] } },
          { googleMaps: {} },
          { computerUse: { environment: 'ENVIRONMENT_BROWSER' } },
          {
            functionDeclarations: [
              { name: 'client_tool', description: 'a tool the CLI runs itself', parametersJsonSchema: { type: 'object' } },
            ],
          },
        ],
      }),
    },
    {
      label: 'headers',
      path: `/v1beta/models/${MODELS.google}:generateContent`,
      expect: 'strip',
      headers: { 'x-goog-user-project': 'hostile-project', 'openai-organization': 'org-hostile' },
      body: google('headers'),
    },
    {
      label: 'cached-content',
      path: `/v1beta/models/${MODELS.google}:generateContent`,
      expect: 'refuse',
      body: google('cached-content', { cachedContent: 'cachedContents/operator' }),
    },
    {
      label: 'file-data',
      path: `/v1beta/models/${MODELS.google}:generateContent`,
      expect: 'refuse',
      body: google('file-data', {}, [
        { fileData: { fileUri: 'https://generativelanguage.googleapis.com/v1beta/files/operator', mimeType: 'text/plain' } },
      ]),
    },
  ],
}

/**
 * Run inside the sandbox: finds the gateway key and URL the CLI was given (in its own environment
 * when the CLI passes it on, else in the CLI's, through /proc, as any agent could), sends each case,
 * and stores every status, reply header and body as the artifact `probe.json`.
 */
const probe = (provider: Provider, cases: Case[]) => `
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
const provider = ${JSON.stringify(provider)}
const cases = ${JSON.stringify(cases)}
const wanted = { anthropic: 'ANTHROPIC_API_KEY', openai: 'AGENTD_GATEWAY_KEY', google: 'GEMINI_API_KEY' }[provider]
function environment() {
  if (process.env[wanted]) return process.env
  for (const pid of readdirSync('/proc').filter((p) => /^[0-9]+$/.test(p))) {
    try {
      const env = Object.fromEntries(readFileSync('/proc/' + pid + '/environ', 'utf8').split('\\0').filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]))
      if (env[wanted]) return env
    } catch {}
  }
  throw new Error('no process holds ' + wanted)
}
const env = environment()
const key = env[wanted]
const base = provider === 'anthropic' ? env.ANTHROPIC_BASE_URL
  : provider === 'google' ? env.GOOGLE_GEMINI_BASE_URL
  : /base_url = "(.*)\\/v1"/.exec(readFileSync((env.CODEX_HOME || env.HOME + '/.codex') + '/config.toml', 'utf8'))[1]
const auth = provider === 'anthropic' ? { 'x-api-key': key, 'anthropic-version': '2023-06-01' } : provider === 'openai' ? { authorization: 'Bearer ' + key } : { 'x-goog-api-key': key }
const result = {}
for (const c of cases) {
  const res = await fetch(base + c.path, { method: 'POST', headers: { 'content-type': 'application/json', ...auth, ...(c.headers ?? {}) }, body: JSON.stringify(c.body) })
  result[c.label] = { status: res.status, headers: Object.fromEntries(res.headers), body: (await res.text()).slice(0, 1000) }
}
mkdirSync('/workspace/.agentd/artifacts', { recursive: true })
writeFileSync('/workspace/.agentd/artifacts/probe.json', JSON.stringify(result))
`

describe('the model gateway forwards only what the CLI needs', () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-passthrough-'))
  const seen: Seen[] = []
  let scripted: Gateway
  let standIn: ReturnType<typeof Bun.serve>
  let t: TestApp

  beforeAll(async () => {
    // The stand-in's model: the scripted one, behind the provider's key; its tool paths are the sandbox's.
    scripted = startGateway({ resolve: (token) => (token === PROVIDER_KEY ? { sessionId: 'provider', workspace: '/workspace' } : null) })
    standIn = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      idleTimeout: 0,
      async fetch(request) {
        const url = new URL(request.url)
        const [, provider, ...rest] = url.pathname.split('/')
        const text = request.method === 'POST' ? await request.text() : ''
        let body: unknown = text
        try {
          body = JSON.parse(text)
        } catch {}
        seen.push({
          provider: provider as Provider,
          path: `/${rest.join('/')}${url.search}`,
          headers: Object.fromEntries(request.headers),
          body,
        })
        const reply = await fetch(`${scripted.url}/${rest.join('/')}${url.search}`, {
          method: request.method,
          headers: request.headers,
          body: text || undefined,
        })
        const headers = new Headers(reply.headers)
        for (const [name, value] of Object.entries(ACCOUNT_HEADERS)) headers.set(name, value)
        return new Response(reply.body, { status: reply.status, headers })
      },
    })
    const base = `http://127.0.0.1:${standIn.port}`
    const config = join(dir, 'agentd.json')
    writeFileSync(
      config,
      JSON.stringify({
        providers: {
          anthropic: { base_url: `${base}/anthropic`, api_key: PROVIDER_KEY },
          openai: { base_url: `${base}/openai/v1`, api_key: PROVIDER_KEY },
          google: { base_url: `${base}/google`, api_key: PROVIDER_KEY },
        },
      }),
    )
    t = await securityApp('bwrap', { AGENTD_CONFIG: config })
  }, 60_000)

  afterAll(async () => {
    await t?.[Symbol.asyncDispose]()
    standIn?.stop(true)
    await scripted?.stop()
    rmSync(dir, { recursive: true, force: true })
  }, 60_000)

  test('each CLI completes its turn through the filter; the probe from its sandbox gets nothing forbidden past it, nor any account header back', async () => {
    const call = caller(t)
    const providers = ['anthropic', 'openai', 'google'] as const
    const ids = await Promise.all(
      providers.map(async (provider) => {
        const created = await call('POST', '/o/acme/p/_/sessions', {
          agent: AGENTS[provider],
          model: MODELS[provider],
          ...(provider === 'google' ? {} : { speed: 'fast' }),
          prompt: script([
            { write: { path: 'probe.mjs', content: probe(provider, CASES[provider]) } },
            { bash: 'node probe.mjs' },
            { answer: `probed ${provider}` },
          ]),
        })
        expect(created.status, JSON.stringify(created.body)).toBe(202)
        return created.body.execution_id as string
      }),
    )
    const views = await Promise.all(ids.map((id) => turnEnded(t, id, 1, 120_000)))

    for (const [i, provider] of providers.entries()) {
      const view = views[i]
      expect(view.status, `${provider}: ${JSON.stringify(view)}`).toBe('completed')
      expect(view.summary).toBe(`probed ${provider}`)
      const mine = seen.filter((s) => s.provider === provider)
      const fromCli = mine.filter((s) => !fromProbe(s))
      expect(fromCli.length, provider).toBeGreaterThanOrEqual(3)

      // What the CLI asks for itself, past what its protocol needs, never reached the provider.
      for (const s of fromCli) {
        const headers = Object.keys(s.headers)
        for (const name of [
          'openai-organization',
          'openai-project',
          'anthropic-organization-id',
          'x-goog-user-project',
          'anthropic-dangerous-direct-browser-access',
        ])
          expect(headers).not.toContain(name)
        if (provider === 'anthropic') {
          expect(s.body.speed, 'Claude Code fast mode is a price tier').toBeUndefined()
          expect(s.body.service_tier).toBeUndefined()
          expect(s.headers['anthropic-beta']).toContain('claude-code-20250219')
          expect(s.headers['anthropic-beta']).not.toContain('fast-mode')
          // What the CLI needs still travels.
          expect(s.body.thinking).toBeDefined()
          expect(s.body.tools.length).toBeGreaterThan(5)
        }
        if (provider === 'openai') {
          expect(s.body.service_tier, 'Codex fast mode is the priority tier').toBeUndefined()
          expect(
            s.body.tools.map((tool: any) => tool.type),
            "Codex's own web_search is provider-side",
          ).not.toContain('web_search')
          expect(s.body.store).toBe(false)
          expect(s.body.include).toEqual(['reasoning.encrypted_content'])
          expect(s.body.tools.some((tool: any) => tool.name === 'exec_command')).toBe(true)
        }
        if (provider === 'google') {
          for (const tool of s.body.tools ?? []) expect(Object.keys(tool)).toEqual(['functionDeclarations'])
          expect(s.body.contents.length).toBeGreaterThan(0)
        }
      }

      // The probe's requests, one by one.
      const res = await t.app.handle(req('GET', `/o/acme/p/_/sessions/${ids[i]}/artifacts/probe.json`, { token: t.admin.token }))
      expect(res.status, `${provider}: the probe's results`).toBe(200)
      const results = (await res.json()) as Record<string, { status: number; headers: Record<string, string>; body: string }>
      for (const c of CASES[provider]) {
        const got = results[c.label]!
        const reached = mine.filter((s) => fromProbe(s, c.label))
        const what = `${provider} ${c.label}: ${got.status} ${got.body.slice(0, 300)}`
        // No reply the sandbox got says anything about the operator's account.
        for (const name of Object.keys(ACCOUNT_HEADERS))
          expect(Object.keys(got.headers), `${what}: reply header ${name}`).not.toContain(name)
        if (c.expect === 'refuse') {
          expect(got.status, what).toBe(400)
          expect(reached, `${what}: reached the provider`).toEqual([])
          continue
        }
        expect(got.status, what).toBe(200)
        expect(reached.length, what).toBe(1)
        expectStripped(provider, c.label, reached[0]!)
      }
    }
  }, 240_000)
})

/** The request as the provider saw it has none of what case `label` asked for. */
function expectStripped(provider: Provider, label: string, s: Seen): void {
  const what = `${provider} ${label}`
  const body = s.body
  switch (`${provider}/${label}`) {
    case 'anthropic/server-tools':
      expect(body.tools, what).toEqual([clientTool])
      return
    case 'anthropic/mcp-servers':
      expect(body.mcp_servers, what).toBeUndefined()
      return
    case 'anthropic/service-tier':
      expect(body.service_tier, what).toBeUndefined()
      return
    case 'anthropic/speed':
      expect(body.speed, what).toBeUndefined()
      return
    case 'anthropic/headers':
      expect(s.headers['anthropic-beta'], what).toBe('interleaved-thinking-2025-05-14')
      for (const name of ['anthropic-organization-id', 'openai-organization', 'openai-project', 'x-goog-user-project'])
        expect(s.headers[name], `${what}: ${name}`).toBeUndefined()
      return
    case 'openai/hosted-tools':
      expect(
        body.tools.map((tool: any) => tool.type),
        what,
      ).toEqual(['function'])
      return
    case 'openai/service-tier':
      expect(body.service_tier, what).toBeUndefined()
      return
    case 'openai/background':
      expect(body.background, what).toBeUndefined()
      return
    case 'openai/store':
      expect(body.store, what).toBe(false)
      return
    case 'openai/include':
      expect(body.include, what).toEqual(['reasoning.encrypted_content'])
      return
    case 'openai/headers':
      for (const name of ['openai-organization', 'openai-project', 'openai-beta', 'x-goog-user-project'])
        expect(s.headers[name], `${what}: ${name}`).toBeUndefined()
      return
    case 'google/provider-tools':
      expect(body.tools, what).toEqual([
        {
          functionDeclarations: [
            { name: 'client_tool', description: 'a tool the CLI runs itself', parametersJsonSchema: { type: 'object' } },
          ],
        },
      ])
      return
    case 'google/headers':
      for (const name of ['x-goog-user-project', 'openai-organization']) expect(s.headers[name], `${what}: ${name}`).toBeUndefined()
      return
    default:
      throw new Error(`no check for ${what}`)
  }
}
