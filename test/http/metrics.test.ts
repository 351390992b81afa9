/**
 * GET /metrics (issue 19): Prometheus text that a Prometheus text parser reads (the port of the
 * Prometheus Python client's parser), moving as sessions run; only for the bearer of
 * AGENTD_METRICS_TOKEN, and off without one.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import parsePrometheusTextFormat from 'parse-prometheus-text-format'
import { makeTestApp, type TestApp } from '../helpers/app'
import { makeKeyApp, startReceiver } from '../helpers/keys'
import { json, req, script, waitFor } from '../helpers/http'

const TOKEN = 'metrics-token-for-tests'
let t: TestApp

beforeAll(async () => {
  t = await makeTestApp({ AGENTD_METRICS_TOKEN: TOKEN })
})
afterAll(() => t[Symbol.asyncDispose]())

async function scrape(token = TOKEN, app: { handle(request: Request): Promise<Response> } = t.app) {
  const res = await app.handle(new Request('http://localhost/metrics', { headers: { authorization: `Bearer ${token}` } }))
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toContain('text/plain')
  const families = parsePrometheusTextFormat(await res.text())
  /** The value of `name` (the sum over its samples whose labels include `labels`); a histogram's count. */
  const value = (name: string, labels: Record<string, string> = {}) => {
    const family = families.find((f) => f.name === name)
    if (!family) throw new Error(`no metric ${name}`)
    return family.metrics
      .filter((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v))
      .reduce((sum, m) => sum + Number(m.value ?? m.count ?? 0), 0)
  }
  return { families, value }
}

test('every family parses, with help and type; the counts move as a session runs', async () => {
  const before = await scrape()
  for (const family of before.families) {
    expect(family.name).toStartWith('agentd_')
    expect(family.help.length).toBeGreaterThan(0)
  }
  expect(before.value('agentd_host_sandboxes_max')).toBe(t.config.capacity.maxSandboxes)

  const created = await json(
    await t.app.handle(
      req('POST', '/o/acme/p/_/sessions', {
        token: t.admin.token,
        body: { agent: 'harness_1', prompt: script([{ bash: 'true' }, { answer: 'measured' }]) },
      }),
    ),
  )
  await waitFor(
    () => t.app.handle(req('GET', `/o/acme/p/_/sessions/${created.execution_id}`, { token: t.admin.token })).then(json),
    (s) => s.status === 'completed',
  )
  const after = await scrape()
  expect(after.value('agentd_sessions', { status: 'completed' })).toBe(before.value('agentd_sessions', { status: 'completed' }) + 1)
  expect(after.value('agentd_turns_total', { outcome: 'completed' })).toBe(before.value('agentd_turns_total', { outcome: 'completed' }) + 1)
  expect(after.value('agentd_sandbox_create_seconds')).toBe(before.value('agentd_sandbox_create_seconds') + 1)
  expect(after.value('agentd_queue_wait_seconds')).toBe(before.value('agentd_queue_wait_seconds') + 1)
  expect(after.value('agentd_events_total')).toBeGreaterThan(before.value('agentd_events_total'))
  expect(after.value('agentd_gateway_tokens_total', { model: 'scripted' })).toBeGreaterThan(
    before.value('agentd_gateway_tokens_total', { model: 'scripted' }),
  )
  expect(after.value('agentd_host_sandboxes_in_use')).toBe(0)
})

test('a scrape without the token, or with another, is 401; without AGENTD_METRICS_TOKEN /metrics is 404', async () => {
  const bare = await t.app.handle(new Request('http://localhost/metrics'))
  expect(bare.status).toBe(401)
  expect((await json(bare)).code).toBe('AUTH_FAILED')
  expect(
    (await t.app.handle(new Request('http://localhost/metrics', { headers: { authorization: 'Bearer metrics-token-for-test' } }))).status,
  ).toBe(401)
  expect(
    (await t.app.handle(new Request('http://localhost/metrics', { headers: { authorization: `Bearer ${t.admin.token}` } }))).status,
  ).toBe(401)
  await using off = await makeTestApp()
  expect((await off.app.handle(new Request('http://localhost/metrics', { headers: { authorization: `Bearer ${TOKEN}` } }))).status).toBe(
    404,
  )
})

test('a webhook delivery counts as delivered, by the outcome the outbox recorded', async () => {
  await using k = await makeKeyApp({ AGENTD_WEBHOOK_ALLOW_PRIVATE: '1', AGENTD_METRICS_TOKEN: TOKEN })
  const rx = startReceiver()
  try {
    const key = (await k.createKey({ name: 'hooks' })).body
    expect((await k.call('PATCH', `/o/acme/api-keys/${key.id}`, k.admin.token, { webhook_url: rx.url })).status).toBe(200)
    const before = await scrape(TOKEN, k.app)
    const run = await k.call('POST', '/o/acme/p/_/sessions', key.secret, { agent: 'harness_1', prompt: script([{ answer: 'hooked' }]) })
    expect(run.status).toBe(202)
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 1,
      30_000,
    )
    const after = await waitFor(
      () => scrape(TOKEN, k.app),
      (m) => m.value('agentd_webhook_attempts_total', { outcome: 'delivered' }) > 0,
    )
    expect(before.value('agentd_webhook_attempts_total')).toBe(0)
    expect(after.value('agentd_webhook_attempts_total', { outcome: 'delivered' })).toBe(1)
    expect(after.value('agentd_webhook_attempts_total', { outcome: 'retrying' })).toBe(0)
  } finally {
    rx.stop()
  }
}, 60_000)
