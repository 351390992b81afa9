/**
 * Plans and metering (contract section 9) through HTTP on a real agentd: the default plan of the
 * config file, `plan clear` and PLAN_REQUIRED, each limit's 402 with `usage` and `limits`, the
 * periods (calendar month and ISO week, UTC), compute minutes metered per turn with paused time
 * free, PAYMENT_METHOD_REQUIRED for a priced model, and GET /o/{org}/usage.
 */
import { Database } from 'bun:sqlite'
import { describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { isoWeekStart, monthStart } from '../../src/plans/periods'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/** A temp folder for a config file, removed when the test's scope ends. */
function configDir() {
  const path = mkdtempSync(join(tmpdir(), 'agentd-plan-config-'))
  return { path, [Symbol.dispose]: () => rmSync(path, { recursive: true, force: true }) }
}

const call = async (t: TestApp, method: string, path: string, body?: unknown, token = t.admin.token) => {
  const res = await t.app.handle(req(method, path, { token, body }))
  return { status: res.status, body: await json(res) }
}
const create = (t: TestApp, body: Record<string, unknown> = {}) =>
  call(t, 'POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: 'hello', ...body })
const rested = (t: TestApp, id: string) =>
  waitFor(
    () => Promise.resolve(t.store.get(id)!.status),
    (s) => ['completed', 'failed', 'input_required', 'needs_review'].includes(s),
    30_000,
  )
const usage = async (t: TestApp) => (await call(t, 'GET', '/o/acme/usage')).body
const KEYS = ['compute_minutes', 'spend_usd', 'tokens', 'weekly_compute_minutes']

/** The server's SQLite file, opened beside it (WAL: both write). */
const sqlite = (t: TestApp) => new Database(t.config.dbPath)

/** A usage row at `at`, as a turn ending then would have stored it. */
function used(t: TestApp, at: number, row: { tokens?: number; computeMs?: number; spendUsd?: number }) {
  using db = sqlite(t)
  db.query('INSERT INTO usage_records (org_id, session_id, at, tokens, compute_ms, spend_usd) VALUES (?, ?, ?, ?, ?, ?)').run(
    t.org.id,
    'earlier',
    at,
    row.tokens ?? 0,
    row.computeMs ?? 0,
    row.spendUsd ?? 0,
  )
}

describe('plans', () => {
  test('every 402 names its code and carries usage and limits with the same keys; a used-up token limit refuses follow-ups and creates', async () => {
    await using t = await makeTestApp()
    const first = await create(t)
    expect(first.status).toBe(202)
    await rested(t, first.body.execution_id)
    const tokens = t.store.get(first.body.execution_id)!.totalTokens!
    expect(tokens).toBeGreaterThan(0)
    // What the turn used is this month's usage.
    expect((await usage(t)).usage.tokens).toBe(tokens)

    t.plans.setPlan('acme', { tokenLimit: tokens })
    const followUp = await call(t, 'POST', `/o/acme/p/_/sessions/${first.body.execution_id}/messages`, { content: 'more' })
    expect(followUp.status).toBe(402)
    expect(followUp.body).toMatchObject({
      code: 'TOKEN_LIMIT_REACHED',
      usage: { tokens },
      limits: { tokens, compute_minutes: null, weekly_compute_minutes: null, spend_usd: null },
    })
    expect(Object.keys(followUp.body.usage).sort()).toEqual(KEYS)
    expect(Object.keys(followUp.body.limits).sort()).toEqual(KEYS)
    expect(followUp.body.error).toContain(`${tokens} tokens a month`)
    expect((await create(t)).body.code).toBe('TOKEN_LIMIT_REACHED')

    // A limit of 0 allows nothing: spend, with nothing spent on the free scripted model.
    t.plans.setPlan('acme', { tokenLimit: null, spendCapUsd: 0 })
    const capped = await create(t)
    expect(capped.status).toBe(402)
    expect(capped.body).toMatchObject({ code: 'SPEND_CAP_REACHED', usage: { spend_usd: 0 }, limits: { tokens: null, spend_usd: 0 } })
  })

  test('compute minutes: a turn is metered for its running time, a pause in it is free, and the monthly and weekly limits refuse at their use', async () => {
    await using t = await makeTestApp()
    const started = Date.now()
    const run = await create(t, { prompt: script([{ sleep: 700 }, { bash: 'true' }, { sleep: 700 }, { answer: 'done' }]) })
    expect(run.status).toBe(202)
    const id = run.body.execution_id
    await waitFor(
      () => Promise.resolve(t.store.get(id)!.status),
      (s) => s === 'running',
      30_000,
    )
    await Bun.sleep(300)
    expect((await call(t, 'PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'paused' })).status).toBe(202)
    await waitFor(
      () => Promise.resolve(t.store.get(id)!.status),
      (s) => s === 'paused',
      30_000,
    )
    const pausedAt = Date.now()
    await Bun.sleep(2000)
    const pausedMs = Date.now() - pausedAt
    expect((await call(t, 'PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'running' })).status).toBe(202)
    await rested(t, id)
    const wallMs = Date.now() - started

    const { usage: metered } = await usage(t)
    // At least the script's own sleeps ran; the pause (2 s) never counted.
    expect(metered.compute_minutes * 60_000).toBeGreaterThanOrEqual(1400 - 50)
    expect(metered.compute_minutes * 60_000).toBeLessThanOrEqual(wallMs - pausedMs)
    expect(metered.weekly_compute_minutes).toBe(metered.compute_minutes)
    // Two stretches: before the pause and after it.
    using db = sqlite(t)
    expect(db.query('SELECT count(*) AS n FROM usage_records WHERE compute_ms > 0').get()).toEqual({ n: 2 })

    t.plans.setPlan('acme', { computeMinutes: 1 })
    expect((await create(t)).status).toBe(202)
    used(t, Date.now(), { computeMs: 60_000 })
    const monthly = await create(t)
    expect(monthly.status).toBe(402)
    expect(monthly.body).toMatchObject({ code: 'COMPUTE_LIMIT_REACHED', limits: { compute_minutes: 1 } })
    expect(monthly.body.usage.compute_minutes).toBeGreaterThanOrEqual(1)

    t.plans.setPlan('acme', { computeMinutes: 1000, weeklyComputeMinutes: 1 })
    const weekly = await create(t)
    expect(weekly.status).toBe(402)
    expect(weekly.body).toMatchObject({
      code: 'WEEKLY_COMPUTE_LIMIT_REACHED',
      limits: { compute_minutes: 1000, weekly_compute_minutes: 1 },
    })
  }, 60_000)

  test('periods: usage of an earlier month or week does not count; a week that began last month counts its days there', async () => {
    // Wednesday 2 December 2026, noon UTC: the month began on Tuesday the 1st, the ISO week on Monday 30 November.
    const now = Date.UTC(2026, 11, 2, 12)
    expect(monthStart(now)).toBe(Date.UTC(2026, 11, 1))
    expect(isoWeekStart(now)).toBe(Date.UTC(2026, 10, 30))
    expect(isoWeekStart(Date.UTC(2026, 10, 30))).toBe(Date.UTC(2026, 10, 30)) // a Monday is its own week's start
    expect(isoWeekStart(Date.UTC(2026, 10, 29, 23, 59))).toBe(Date.UTC(2026, 10, 23)) // Sunday: the Monday before
    await using t = await makeTestApp({}, { now: () => now })
    used(t, Date.UTC(2026, 10, 20), { tokens: 1000, computeMs: 600_000, spendUsd: 5 }) // last month, last week
    used(t, Date.UTC(2026, 10, 30, 8), { tokens: 10, computeMs: 120_000, spendUsd: 0.5 }) // last month, this week
    used(t, Date.UTC(2026, 11, 1, 8), { tokens: 20, computeMs: 60_000, spendUsd: 0.25 }) // this month, this week
    expect((await usage(t)).usage).toEqual({ tokens: 20, compute_minutes: 1, weekly_compute_minutes: 3, spend_usd: 0.25 })

    t.plans.setPlan('acme', { tokenLimit: 21, computeMinutes: 2, weeklyComputeMinutes: 4, spendCapUsd: 1 })
    expect((await create(t)).status).toBe(202) // the old month's 1000 tokens and $5 do not count
    t.plans.setPlan('acme', { weeklyComputeMinutes: 3 })
    expect((await create(t)).body.code).toBe('WEEKLY_COMPUTE_LIMIT_REACHED') // Monday's 2 minutes do
  })

  test('plan clear: creates and follow-ups are 402 PLAN_REQUIRED with null limits until plan set', async () => {
    await using t = await makeTestApp()
    const first = await create(t)
    await rested(t, first.body.execution_id)
    expect(t.plans.clearPlan('acme')).toEqual({ org: 'acme', plan: null })
    const refused = await create(t)
    expect(refused.status).toBe(402)
    expect(refused.body).toMatchObject({ code: 'PLAN_REQUIRED', limits: null })
    expect(Object.keys(refused.body.usage).sort()).toEqual(KEYS)
    expect((await call(t, 'POST', `/o/acme/p/_/sessions/${first.body.execution_id}/messages`, { content: 'more' })).body.code).toBe(
      'PLAN_REQUIRED',
    )
    expect(await usage(t)).toMatchObject({ plan: null, limits: null })
    // Nothing was made by the refusals.
    expect((await call(t, 'GET', '/o/acme/p/_/sessions')).body.executions.length).toBe(1)

    t.plans.setPlan('acme', { tokenLimit: 1_000_000 })
    expect((await create(t)).status).toBe(202)
    expect(await usage(t)).toMatchObject({ plan: { source: 'org', payment_method: 'card' }, limits: { tokens: 1_000_000 } })
  })

  test("the config file's default plan: every org starts on it; a priced model needs a payment method, the free scripted one never does", async () => {
    using dir = configDir()
    const file = join(dir.path, 'agentd.json')
    writeFileSync(file, JSON.stringify({ plans: { default: { token_limit: 500_000, weekly_compute_minutes: 600, max_concurrent: 2 } } }))
    await using t = await makeTestApp({ AGENTD_CONFIG: file })
    expect(await usage(t)).toEqual({
      plan: { source: 'default', max_concurrent: 2, payment_method: 'none' },
      usage: { tokens: 0, compute_minutes: 0, weekly_compute_minutes: 0, spend_usd: 0 },
      limits: { tokens: 500_000, compute_minutes: null, weekly_compute_minutes: 600, spend_usd: null },
    })
    const priced = await create(t, { model: 'claude-sonnet-4-6' })
    expect(priced.status).toBe(402)
    expect(priced.body).toMatchObject({ code: 'PAYMENT_METHOD_REQUIRED', limits: { tokens: 500_000 } })
    expect(priced.body.error).toContain('claude-sonnet-4-6')
    expect((await create(t)).status).toBe(202)

    // plan set starts from the default plan and changes what it names.
    expect(t.plans.setPlan('acme', { paymentMethod: 'card' })).toMatchObject({
      token_limit: 500_000,
      weekly_compute_minutes: 600,
      max_concurrent: 2,
      payment_method: 'card',
    })
    expect((await create(t, { model: 'claude-sonnet-4-6' })).status).not.toBe(402)
  })

  test('without a payment method, a sandbox gets no priced model from the gateway either, whatever it asks for', async () => {
    using dir = configDir()
    const file = join(dir.path, 'agentd.json')
    writeFileSync(file, JSON.stringify({ plans: { default: { payment_method: 'none' } } }))
    await using t = await makeTestApp({ AGENTD_CONFIG: file })
    // The session's own model is free; its key reaches the host through the tool output.
    const run = await create(t, {
      prompt: script([{ bash: 'printf "LIVE=%s\\n" "$ANTHROPIC_API_KEY"' }, { sleep: 60_000 }, { answer: 'never' }]),
    })
    expect(run.status).toBe(202)
    const id = run.body.execution_id
    const key = await waitFor(
      async () =>
        /LIVE=(gw_[A-Za-z0-9_-]+)/.exec(JSON.stringify((await call(t, 'GET', `/o/acme/p/_/sessions/${id}/messages`)).body))?.[1] ?? null,
      (found) => found !== null,
      30_000,
    )
    const ask = (model: string) =>
      fetch(`${t.gateway.url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': key!, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
        body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content: script([{ answer: 'hi' }]) }] }),
      })
    const priced = await ask('claude-sonnet-4-6')
    expect(priced.status).toBe(403)
    expect(await priced.text()).toContain('claude-sonnet-4-6')
    expect((await ask('scripted')).status).toBe(200)
    expect((await call(t, 'PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'cancelled' })).status).toBe(200)
  }, 60_000)

  test('a turn cancelled after its model calls still bills their tokens', async () => {
    await using t = await makeTestApp()
    const run = await create(t, { prompt: script([{ bash: 'echo step-$((40 + 2))-done' }, { sleep: 60_000 }, { answer: 'never' }]) })
    const id = run.body.execution_id
    // The first model call is answered (its tokens metered) and its tool ran (its output, which the
    // prompt does not hold, is in the transcript); the next call waits in its sleep.
    await waitFor(
      async () => JSON.stringify((await call(t, 'GET', `/o/acme/p/_/sessions/${id}/messages`)).body).includes('step-42-done'),
      Boolean,
      30_000,
    )
    expect((await call(t, 'PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'cancelled' })).status).toBe(200)
    const billed = await waitFor(
      async () => (await usage(t)).usage.tokens,
      (tokens) => tokens > 0,
      30_000,
    )
    expect(billed).toBeGreaterThan(0)
    expect(t.store.get(id)!.status).toBe('cancelled')
  }, 60_000)

  test('a config file whose default plan is wrong stops the start, naming the field', async () => {
    using dir = configDir()
    const file = join(dir.path, 'agentd.json')
    writeFileSync(file, JSON.stringify({ plans: { default: { token_limit: -1 } } }))
    await expect(makeTestApp({ AGENTD_CONFIG: file })).rejects.toThrow(/AGENTD_CONFIG plans\.default\.token_limit/)
  })

  test('GET /o/{org}/usage is for org admins: a member is 403, an API key 401, another org 403 or 404', async () => {
    await using t = await makeTestApp()
    expect((await call(t, 'GET', '/o/acme/usage')).status).toBe(200)
    expect((await call(t, 'GET', '/o/acme/usage', undefined, t.member.token)).status).toBe(403)
    const key = await call(t, 'POST', '/o/acme/api-keys', { name: 'ci', scopes: ['runs:read'] })
    expect(key.status).toBe(201)
    expect((await call(t, 'GET', '/o/acme/usage', undefined, key.body.secret)).status).toBe(401)
    t.identity.createOrg('other')
    expect([403, 404]).toContain((await call(t, 'GET', '/o/other/usage')).status)
  })
})
