/**
 * Provider accounts (issue 16 part 3): a user stores their own provider API key, sealed at rest and
 * never returned; a run with `account_id` reaches the provider with that key (never the operator's,
 * never the session's gateway key) and is not metered on the org's plan. The provider is a local
 * server speaking the OpenAI Responses protocol that accepts only the keys it was given (a second
 * gateway, whose scripted model answers).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startGateway, type Gateway } from '../../src/gateway/gateway'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

const OPERATOR_KEY = 'sk-operator-key-0000'
const USER_KEY = `sk-user-${randomBytes(12).toString('hex')}`
const dir = mkdtempSync(join(tmpdir(), 'agentd-accounts-'))
const seenKeys: (string | null)[] = []
let provider: Gateway
let t: TestApp

const call = async (method: string, path: string, body?: unknown, token = t.admin.token) => {
  const res = await t.app.handle(req(method, path, { token, body }))
  return { status: res.status, body: res.status === 204 ? null : await json(res) }
}
const codexRun = (extra: Record<string, unknown>, token = t.admin.token) =>
  call(
    'POST',
    '/o/acme/p/_/sessions',
    { agent: 'harness_2', model: 'gpt-5.5', prompt: script([{ bash: 'true' }, { answer: 'on my key' }]), ...extra },
    token,
  )
const rested = (id: string) =>
  waitFor(
    () => call('GET', `/o/acme/p/_/sessions/${id}`).then((r) => r.body),
    (s) => !['queued', 'allocating', 'running'].includes(s.status),
    30_000,
  )

beforeAll(async () => {
  provider = startGateway({
    resolve: (token) => {
      seenKeys.push(token)
      return token === OPERATOR_KEY || token === USER_KEY ? { sessionId: 'provider', workspace: '/nowhere' } : null
    },
  })
  const config = join(dir, 'agentd.json')
  writeFileSync(
    config,
    JSON.stringify({
      providers: { openai: { base_url: `${provider.url}/v1`, api_key: OPERATOR_KEY } },
      accounts: { encryption_key: randomBytes(32).toString('base64') },
    }),
  )
  t = await makeTestApp({ AGENTD_CONFIG: config })
})
afterAll(async () => {
  await t?.[Symbol.asyncDispose]()
  await provider.stop()
  rmSync(dir, { recursive: true, force: true })
})

describe('provider accounts', () => {
  let account: string

  test('a stored key is never returned and never on disk in the clear', async () => {
    const created = await call('POST', '/o/acme/accounts', { provider: 'openai', api_key: USER_KEY, name: 'mine' })
    expect(created.status).toBe(201)
    expect(created.body).toEqual({
      id: expect.stringMatching(/^acct_/),
      provider: 'openai',
      name: 'mine',
      key_hint: USER_KEY.slice(-4),
      created_at: expect.any(String),
    })
    account = created.body.id
    const listed = await call('GET', '/o/acme/accounts')
    expect(listed.body).toEqual({ data: [created.body] })
    expect(JSON.stringify(listed.body)).not.toContain(USER_KEY.slice(0, -4))
    // The database file (and its write-ahead log) hold the key sealed only.
    for (const file of [t.config.dbPath, `${t.config.dbPath}-wal`]) {
      if (existsSync(file)) expect(readFileSync(file).includes(Buffer.from(USER_KEY.slice(8, 24)))).toBe(false)
    }
  })

  test('a run on the account reaches the provider with its key only, and the plan meters none of its tokens or spend', async () => {
    // A plan that allows no tokens, no spend, and has no payment method: a platform run is refused.
    t.plans.setPlan('acme', { tokenLimit: 0, spendCapUsd: 0, paymentMethod: 'none' })
    expect((await codexRun({})).body.code).toBe('PAYMENT_METHOD_REQUIRED')
    seenKeys.length = 0
    const run = await codexRun({ account_id: account })
    expect(run.status).toBe(202)
    const session = await rested(run.body.execution_id)
    expect(session).toMatchObject({ status: 'completed', summary: 'on my key', model: 'gpt-5.5' })
    expect(session.total_tokens).toBeGreaterThan(0)
    // Every model call reached the provider with the user's key: never the operator's, never the gateway's own.
    expect(seenKeys.length).toBe(2)
    expect(new Set(seenKeys)).toEqual(new Set([USER_KEY]))
    // Its sandbox time is still the org's; its tokens and spend are the user's.
    const usage = (await call('GET', '/o/acme/usage')).body.usage
    expect(usage).toMatchObject({ tokens: 0, spend_usd: 0 })
    expect(usage.compute_minutes).toBeGreaterThan(0)
    // A follow-up on it is allowed too, past the limits the platform runs hit.
    expect(
      (await call('POST', `/o/acme/p/_/sessions/${run.body.execution_id}/messages`, { content: script([{ answer: 'again' }]) })).status,
    ).toBe(200)
    expect(await rested(run.body.execution_id)).toMatchObject({ status: 'completed', summary: 'again' })
    expect(new Set(seenKeys)).toEqual(new Set([USER_KEY]))
    t.plans.setPlan('acme', { tokenLimit: null, spendCapUsd: null, paymentMethod: 'card' })
  }, 60_000)

  test("an API key's run may use its creator's account", async () => {
    const key = await call('POST', '/o/acme/api-keys', { name: 'ci' })
    expect(key.status).toBe(201)
    seenKeys.length = 0
    const run = await codexRun({ account_id: account }, key.body.secret)
    expect(run.status).toBe(202)
    expect(await rested(run.body.execution_id)).toMatchObject({ status: 'completed' })
    expect(new Set(seenKeys)).toEqual(new Set([USER_KEY]))
    // The account routes themselves are for signed-in users.
    expect((await call('GET', '/o/acme/accounts', undefined, key.body.secret)).status).toBe(401)
  }, 60_000)

  test('another user can neither see, use nor remove it, nor give a session on it more work; a model of another provider is 400; bad bodies are 400', async () => {
    expect((await call('GET', '/o/acme/accounts', undefined, t.member.token)).body).toEqual({ data: [] })
    expect((await codexRun({ account_id: account }, t.member.token)).status).toBe(404)
    expect((await call('DELETE', `/o/acme/accounts/${account}`, undefined, t.member.token)).status).toBe(404)
    expect((await codexRun({ account_id: 'acct_nope' })).status).toBe(404)
    // A session on it takes new work from its owner only: it would run on their key.
    const mine = await codexRun({ account_id: account })
    await rested(mine.body.execution_id)
    const followUp = await call('POST', `/o/acme/p/_/sessions/${mine.body.execution_id}/messages`, { content: 'more' }, t.member.token)
    expect(followUp.status).toBe(403)
    expect(followUp.body.error).toContain("another user's own provider account")
    expect((await call('GET', `/o/acme/p/_/sessions/${mine.body.execution_id}`, undefined, t.member.token)).body.turns_count).toBe(1)
    const other = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: 'hi', account_id: account })
    expect(other.status).toBe(400)
    expect(other.body.error).toContain('openai')
    for (const body of [
      { provider: 'google', api_key: 'k'.repeat(20) },
      { provider: 'openai' },
      { provider: 'openai', api_key: 'short' },
      { provider: 'openai', api_key: USER_KEY, extra: 1 },
    ]) {
      const res = await call('POST', '/o/acme/accounts', body)
      expect(res.status, JSON.stringify(body)).toBe(400)
    }
  }, 60_000)

  test('once removed, new runs on it are 404 and a session on it can make no further model call', async () => {
    const run = await codexRun({ account_id: account })
    const id = run.body.execution_id
    await rested(id)
    expect((await call('DELETE', `/o/acme/accounts/${account}`)).status).toBe(204)
    expect((await codexRun({ account_id: account })).status).toBe(404)
    seenKeys.length = 0
    expect((await call('POST', `/o/acme/p/_/sessions/${id}/messages`, { content: script([{ answer: 'after' }]) })).status).toBe(200)
    const after = await rested(id)
    expect(after.status).toBe('failed')
    expect(after.error ?? '').toContain('provider account was removed')
    expect(seenKeys).toEqual([])
  }, 60_000)
})

test('without accounts.encryption_key the server seals under the key it generated in DATA_DIR (contract section 10); a malformed key stops the start', async () => {
  await using plain = await makeTestApp()
  const res = await plain.app.handle(
    req('POST', '/o/acme/accounts', { token: plain.admin.token, body: { provider: 'anthropic', api_key: 'sk-ant-0123456789' } }),
  )
  expect(res.status).toBe(201)
  expect(Buffer.from(readFileSync(join(plain.dir, 'encryption.key'), 'utf8').trim(), 'base64').length).toBe(32)
  const config = join(dir, 'bad.json')
  writeFileSync(config, JSON.stringify({ accounts: { encryption_key: 'too short' } }))
  await expect(makeTestApp({ AGENTD_CONFIG: config })).rejects.toThrow(/accounts\.encryption_key must be 32 bytes/)
})
