/**
 * The operator's path to a real provider: AGENTD_CONFIG names one, a session on one of its models
 * runs through the gateway to it with the operator's key, and the session is metered from the
 * provider's counts. The provider is a local server speaking the OpenAI protocol that accepts
 * only that key (a second gateway, whose scripted model answers).
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startGateway, type Gateway, type UsageRecord } from '../../src/gateway/gateway'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

const KEY = 'sk-operator-key'
const dir = mkdtempSync(join(tmpdir(), 'agentd-providers-'))
const seenKeys: (string | null)[] = []
const providerUsage: UsageRecord[] = []
let provider: Gateway
let t: TestApp

beforeAll(async () => {
  provider = startGateway({
    resolve: (token) => {
      seenKeys.push(token)
      return token === KEY ? { sessionId: 'provider', workspace: '/nowhere' } : null
    },
    onUsage: (u) => providerUsage.push(u),
  })
  const config = join(dir, 'agentd.json')
  writeFileSync(config, JSON.stringify({ providers: { openai: { base_url: `${provider.url}/v1`, api_key: KEY } } }))
  t = await makeTestApp({ AGENTD_CONFIG: config })
})
afterAll(async () => {
  await t[Symbol.asyncDispose]()
  await provider.stop()
  rmSync(dir, { recursive: true, force: true })
})

test('a Codex session on gpt-5.5 is forwarded with the operator key and metered from the provider', async () => {
  const res = await t.app.handle(
    req('POST', '/o/acme/p/_/sessions', {
      token: t.admin.token,
      body: { agent: 'harness_2', model: 'gpt-5.5', prompt: script([{ bash: 'true' }, { answer: 'from the provider' }]) },
    }),
  )
  expect(res.status).toBe(202)
  const id = (await json(res)).execution_id
  const session = await waitFor(
    () => t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token: t.admin.token })).then(json),
    (s) => s.status !== 'allocating' && s.status !== 'running' && s.status !== 'queued',
  )
  expect(session).toMatchObject({ status: 'completed', summary: 'from the provider', model: 'gpt-5.5', tool_calls_count: 1 })
  // Every model call reached the provider, with its key and never the session's gateway key.
  expect(seenKeys.length).toBe(2)
  expect(new Set(seenKeys)).toEqual(new Set([KEY]))
  expect(providerUsage.every((u) => u.model === 'gpt-5.5')).toBe(true)
  expect(session.input_tokens).toBe(providerUsage.reduce((sum, u) => sum + u.input, 0))
  expect(session.output_tokens).toBe(providerUsage.reduce((sum, u) => sum + u.output, 0))
  // Priced from the catalog row of gpt-5.5, as a real provider's tokens are.
  expect(session.total_cost_usd).toBeGreaterThan(0)
})
