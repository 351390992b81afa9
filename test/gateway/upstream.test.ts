/**
 * Forwarding to a real provider. The "provider" is a local server that speaks all three
 * protocols and accepts only the operator's key: a second gateway behind a recording proxy.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ConfigError } from '../../src/config'
import { startGateway, type Gateway, type Providers, type UsageRecord } from '../../src/gateway/gateway'
import { loadProviders, parseProviders } from '../../src/gateway/providers'
import { poll } from '../helpers/poll'

const SESSION_TOKEN = 'agw_session_token'
const PROVIDER_KEY = 'sk-provider-secret'
const gateways: Gateway[] = []
const seen: { url: string; headers: Record<string, string> }[] = []
const providerUsage: UsageRecord[] = []
let provider: ReturnType<typeof Bun.serve>

beforeAll(() => {
  const upstream = startGateway({
    resolve: (token) => (token === PROVIDER_KEY ? { sessionId: 'provider', workspace: '/workspace' } : null),
    onUsage: (u) => providerUsage.push(u),
  })
  gateways.push(upstream)
  provider = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const url = new URL(req.url)
      seen.push({ url: url.pathname + url.search, headers: Object.fromEntries(req.headers) })
      // The provider's API lives under a path prefix, as `https://api.openai.com/v1` does.
      const path = url.pathname.replace(/^\/api/, '')
      return fetch(upstream.url + path + url.search, { method: req.method, headers: req.headers, body: await req.arrayBuffer() })
    },
  })
})
afterAll(async () => {
  provider.stop(true)
  for (const g of gateways) await g.stop()
})

function gatewayWith(providers: Providers, usage: UsageRecord[]): Gateway {
  const gateway = startGateway({
    resolve: (t) => (t === SESSION_TOKEN ? { sessionId: 'sess', workspace: '/workspace' } : null),
    onUsage: (u) => usage.push(u),
    providers,
  })
  gateways.push(gateway)
  return gateway
}

const base = () => `http://127.0.0.1:${provider.port}/api`
const all = (key = PROVIDER_KEY): Providers => ({
  anthropic: { baseUrl: base(), apiKey: key },
  openai: { baseUrl: `${base()}/v1`, apiKey: key },
  google: { baseUrl: base(), apiKey: key },
})
const script = (steps: unknown) => `Task\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\``
const steps = script([{ usage: { input: 5, output: 6, cache_read: 7, cache_write: 8 } }, { answer: 'forwarded' }])

/** One request per protocol, as each CLI sends it, for a real model of that provider. */
const requests = {
  anthropic: (model: string, stream: boolean) => ({
    path: '/v1/messages?beta=true',
    headers: { 'x-api-key': SESSION_TOKEN, 'anthropic-version': '2023-06-01' },
    body: { model, max_tokens: 100, stream, messages: [{ role: 'user', content: steps }] },
  }),
  openai: (model: string, stream: boolean) => ({
    path: '/v1/responses',
    headers: { authorization: `Bearer ${SESSION_TOKEN}` },
    body: { model, stream, input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: steps }] }] },
  }),
  google: (model: string, stream: boolean) => ({
    path: `/v1beta/models/${model}:${stream ? 'streamGenerateContent?alt=sse&' : 'generateContent?'}key=${SESSION_TOKEN}`,
    headers: {},
    body: { contents: [{ role: 'user', parts: [{ text: steps }] }], tools: [{ functionDeclarations: [{ name: 'run_shell_command' }] }] },
  }),
}
const MODELS = { anthropic: 'claude-opus-4-8', openai: 'gpt-5.5', google: 'gemini-3.1-pro-preview' } as const

function send(gateway: Gateway, req: { path: string; headers: Record<string, string>; body: unknown }) {
  return fetch(gateway.url + req.path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...req.headers },
    body: JSON.stringify(req.body),
  })
}

describe('forwarding to a configured provider', () => {
  for (const name of ['anthropic', 'openai', 'google'] as const) {
    for (const stream of [true, false]) {
      test(`${name}, ${stream ? 'streamed' : 'whole'}: the provider key replaces the session key; usage is metered as for the scripted model`, async () => {
        const usage: UsageRecord[] = []
        const gateway = gatewayWith(all(), usage)
        seen.length = 0
        providerUsage.length = 0
        const res = await send(gateway, requests[name](MODELS[name], stream))
        expect(res.status).toBe(200)
        const text = await res.text()
        expect(text).toContain('forwarded')
        // Metering reads its copy of the stream asynchronously.
        await poll('the answer metered', () => usage.length > 0 && providerUsage.length > 0, { timeoutMs: 5_000 })

        expect(seen).toHaveLength(1)
        expect(JSON.stringify(seen[0])).not.toContain(SESSION_TOKEN)
        const auth = {
          anthropic: seen[0]!.headers['x-api-key'],
          openai: seen[0]!.headers.authorization,
          google: seen[0]!.headers['x-goog-api-key'],
        }[name]
        expect(auth).toBe(name === 'openai' ? `Bearer ${PROVIDER_KEY}` : PROVIDER_KEY)
        // The provider answered with its scripted model; what it metered is what the gateway meters.
        expect(providerUsage).toHaveLength(1)
        const { sessionId: _, ...counts } = providerUsage[0]!
        expect(usage).toEqual([{ sessionId: 'sess', ...counts }])
        // OpenAI and Gemini have no cache-write count: those tokens are plain input on their wire.
        const expected = name === 'anthropic' ? { input: 5, cacheWrite: 8 } : { input: 13, cacheWrite: 0 }
        expect(counts).toEqual({ model: MODELS[name], output: 6, cacheRead: 7, ...expected })
      })
    }
  }

  test('the scripted model stays local even with providers configured', async () => {
    const usage: UsageRecord[] = []
    const gateway = gatewayWith(all(), usage)
    seen.length = 0
    for (const name of ['anthropic', 'openai', 'google'] as const)
      expect((await send(gateway, requests[name]('scripted', false))).status).toBe(200)
    expect(seen).toEqual([])
    expect(usage.map((u) => u.model)).toEqual(['scripted', 'scripted', 'scripted'])
  })

  test('a protocol without a configured provider is answered by the scripted model', async () => {
    const usage: UsageRecord[] = []
    const gateway = gatewayWith({ anthropic: all().anthropic }, usage)
    seen.length = 0
    expect((await send(gateway, requests.openai('gpt-5.5', false))).status).toBe(200)
    expect(seen).toEqual([])
  })

  test('the provider refusing the key is passed through, and nothing is metered', async () => {
    const usage: UsageRecord[] = []
    const res = await send(gatewayWith(all('sk-wrong'), usage), requests.anthropic('claude-opus-4-8', true))
    expect(res.status).toBe(401)
    expect(await res.json()).toEqual({ type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key' } })
    await Bun.sleep(20)
    expect(usage).toEqual([])
  })

  test('an unreachable provider is a 502 that says so', async () => {
    const gateway = gatewayWith({ openai: { baseUrl: 'http://127.0.0.1:1/v1', apiKey: PROVIDER_KEY } }, [])
    const res = await send(gateway, requests.openai('gpt-5.5', true))
    expect(res.status).toBe(502)
    expect(((await res.json()) as any).error.message).toContain('the provider could not be reached')
  })
})

describe('providers in AGENTD_CONFIG', () => {
  test('parses each provider, trimming the base URL', () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentd-providers-'))
    const file = join(dir, 'config.json')
    writeFileSync(file, JSON.stringify({ catalog: {}, providers: { openai: { base_url: 'https://api.openai.com/v1/', api_key: 'sk-1' } } }))
    expect(loadProviders(file)).toEqual({ openai: { baseUrl: 'https://api.openai.com/v1', apiKey: 'sk-1' } })
    writeFileSync(file, '{oops')
    expect(() => loadProviders(file)).toThrow(ConfigError)
    rmSync(dir, { recursive: true, force: true })
    expect(loadProviders(null)).toEqual({})
    expect(parseProviders(undefined)).toEqual({})
  })

  test('a mistake names the field', () => {
    const cases: [unknown, string][] = [
      [[], 'providers must be an object'],
      [{ mistral: {} }, 'providers.mistral: unknown provider'],
      [{ google: 'key' }, 'providers.google must be {base_url, api_key}'],
      [{ anthropic: { base_url: 'ftp://x', api_key: 'k' } }, 'providers.anthropic.base_url must be an http(s) URL'],
      [{ anthropic: { base_url: 'https://x', api_key: '' } }, 'providers.anthropic.api_key must be a non-empty string'],
    ]
    for (const [raw, message] of cases) expect(() => parseProviders(raw)).toThrow(message)
  })
})
