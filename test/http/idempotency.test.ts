import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { makeKeyApp, type KeyApp } from '../helpers/keys'
import { req, script, waitFor } from '../helpers/http'

/**
 * `Idempotency-Key` on session create (contract section 8), through the HTTP API of a real agentd
 * (process sandboxes, Codex against the scripted model). The org's plan allows one run at a time
 * and a blocker holds it, so keyed sessions stay `queued` and their views do not move under the
 * assertions.
 */

let t: KeyApp
let keySecret: string
/** 24 hours scaled to 1.5 s, so the retention can be waited out. */
const RETENTION_MS = 1500
beforeAll(async () => {
  t = await makeKeyApp({ AGENTD_TIME_SCALE: String(RETENTION_MS / (24 * 3600 * 1000)) })
  t.plans.setPlan('acme', { maxConcurrent: 1 })
  keySecret = (await t.createKey({ name: 'ci', max_concurrent: 100 })).body.secret
  const blocker = await create(t.admin.token, { agent: 'harness_2', prompt: script([{ sleep: 120_000 }]) })
  expect(blocker.status).toBe(202)
  await waitFor(
    () => t.call('GET', `/o/acme/p/_/sessions/${blocker.body.execution_id}`, t.admin.token),
    (r) => r.body.status === 'running',
    30_000,
  )
})
afterAll(() => t[Symbol.asyncDispose]())

const SESSIONS = '/o/acme/p/_/sessions'

async function create(token: string, body: unknown, key?: string, org = 'acme') {
  const res = await t.app.handle(
    req('POST', `/o/${org}/p/_/sessions`, { token, body, headers: key === undefined ? {} : { 'idempotency-key': key } }),
  )
  const text = await res.text()
  return { status: res.status, body: JSON.parse(text), text }
}

/** Sessions of org `acme` in the database file, whatever the API says. */
function sessionCount(): number {
  const db = new Database(t.config.dbPath, { readonly: true })
  try {
    return (db.query("select count(*) as n from sessions where org_id = (select id from orgs where slug = 'acme')").get() as { n: number })
      .n
  } finally {
    db.close()
  }
}

const body = (n: number) => ({ agent: 'harness_2', prompt: `task ${n}`, persistence: 'resumable' })

describe('Idempotency-Key on POST …/sessions', () => {
  test('50 concurrent identical creates with one key: one session, 50 identical 202s', async () => {
    const before = sessionCount()
    const answers = await Promise.all(Array.from({ length: 50 }, () => create(keySecret, body(1), 'deploy-42')))
    expect(answers.map((a) => a.status)).toEqual(Array(50).fill(202))
    expect(new Set(answers.map((a) => a.text)).size).toBe(1)
    expect(answers[0]!.body.status).toBe('queued')
    expect(sessionCount()).toBe(before + 1)
  })

  test('the same body (as parsed JSON: key order and spacing aside) answers with the first session; another body, or another Project, is 409 and makes nothing', async () => {
    const first = await create(t.admin.token, body(2), 'k-2')
    expect(first.status).toBe(202)
    const reordered = await t.app.handle(
      req('POST', SESSIONS, {
        token: t.admin.token,
        body: `{ "persistence": "resumable",  "prompt": "task 2", "agent": "harness_2" }`,
        headers: { 'idempotency-key': 'k-2' },
      }),
    )
    expect(reordered.status).toBe(202)
    expect(((await reordered.json()) as { execution_id: string }).execution_id).toBe(first.body.execution_id)
    const before = sessionCount()
    const other = await create(t.admin.token, { ...body(2), prompt: 'task 2, but different' }, 'k-2')
    expect(other.status).toBe(409)
    expect(other.body).toMatchObject({ code: 'IDEMPOTENCY_CONFLICT' })
    expect(typeof other.body.error).toBe('string')
    // The same body under another Project's path is another request too.
    const elsewhere = await t.app.handle(
      req('POST', '/o/acme/p/web/sessions', { token: t.admin.token, body: body(2), headers: { 'idempotency-key': 'k-2' } }),
    )
    expect(elsewhere.status).toBe(409)
    expect(sessionCount()).toBe(before)
  })

  test('a key belongs to its caller and org: another user, another API key and another org each get their own session', async () => {
    const mine = await create(t.admin.token, body(3), 'shared-name')
    const colleague = await create(t.admin2.token, body(3), 'shared-name')
    const otherKey = (await t.createKey({ name: 'other ci' })).body.secret
    const viaKey = await create(otherKey, body(3), 'shared-name')
    const elsewhere = await create(t.stranger.token, body(3), 'shared-name', 'other')
    for (const answer of [mine, colleague, viaKey, elsewhere]) expect(answer.status).toBe(202)
    const ids = [mine, colleague, viaKey, elsewhere].map((a) => a.body.execution_id)
    expect(new Set(ids).size).toBe(4)
    // Each caller's replay still finds its own.
    expect((await create(t.admin2.token, body(3), 'shared-name')).body.execution_id).toBe(colleague.body.execution_id)
  })

  test('once its session is cancelled, or failed, the key starts a new session (and answers with that one after)', async () => {
    const first = await create(t.admin.token, body(4), 'k-4')
    expect((await t.call('PATCH', `${SESSIONS}/${first.body.execution_id}`, t.admin.token, { status: 'cancelled' })).status).toBe(200)
    const second = await create(t.admin.token, body(4), 'k-4')
    expect(second.status).toBe(202)
    expect(second.body.execution_id).not.toBe(first.body.execution_id)
    expect((await create(t.admin.token, body(4), 'k-4')).body.execution_id).toBe(second.body.execution_id)

    // A run that fails: the blocker gives way to it for a moment (the plan allows two).
    t.plans.setPlan('acme', { maxConcurrent: 2 })
    try {
      const failing = { agent: 'harness_2', prompt: script([{ fail: 'the model gave up' }]) }
      const doomed = await create(t.admin.token, failing, 'k-fail')
      await waitFor(
        () => t.call('GET', `${SESSIONS}/${doomed.body.execution_id}`, t.admin.token),
        (r) => r.body.status === 'failed',
        30_000,
      )
      const retried = await create(t.admin.token, failing, 'k-fail')
      expect(retried.status).toBe(202)
      expect(retried.body.execution_id).not.toBe(doomed.body.execution_id)
    } finally {
      t.plans.setPlan('acme', { maxConcurrent: 1 })
    }
  })

  test('a replay is answered even when a new create would be refused (it makes nothing)', async () => {
    const first = await create(t.admin.token, body(5), 'k-5')
    expect(first.status).toBe(202)
    t.plans.setPlan('acme', { maxConcurrent: 1, tokenLimit: 0 })
    try {
      const fresh = await create(t.admin.token, body(6))
      expect(fresh.status).toBe(402)
      const replay = await create(t.admin.token, body(5), 'k-5')
      expect(replay.status).toBe(202)
      expect(replay.body.execution_id).toBe(first.body.execution_id)
    } finally {
      t.plans.setPlan('acme', { maxConcurrent: 1, tokenLimit: 1e12 })
    }
  })

  test('kept for 24 hours (scaled here): after that the same key and body make a new session, and the row is swept', async () => {
    const first = await create(t.admin.token, body(7), 'k-7')
    await Bun.sleep(RETENTION_MS + 100)
    const later = await create(t.admin.token, { ...body(7), prompt: 'another body is no conflict now' }, 'k-7')
    expect(later.status).toBe(202)
    expect(later.body.execution_id).not.toBe(first.body.execution_id)
    // The periodic sweep removes rows past the retention (the one just written stays).
    await waitFor(
      async () => {
        const db = new Database(t.config.dbPath, { readonly: true })
        try {
          return (
            db.query('select count(*) as n from idempotency_keys where created_at < ?').get(Date.now() - RETENTION_MS - 50) as { n: number }
          ).n
        } finally {
          db.close()
        }
      },
      (n) => n === 0,
      10_000,
    )
  })

  test('a key that is empty, over 255 characters or not printable ASCII is 400 VALIDATION_ERROR, and nothing is made', async () => {
    const before = sessionCount()
    for (const key of ['', 'x'.repeat(256), 'caf\u00e9', 'tab\there']) {
      const answer = await create(t.admin.token, body(8), key)
      expect(answer.status).toBe(400)
      expect(answer.body).toMatchObject({ code: 'VALIDATION_ERROR' })
      expect(typeof answer.body.error).toBe('string')
    }
    expect((await create(t.admin.token, body(8), 'x'.repeat(255))).status).toBe(202)
    expect(sessionCount()).toBe(before + 1)
  })

  test('without a key, identical creates make a session each', async () => {
    const before = sessionCount()
    const a = await create(t.admin.token, body(9))
    const b = await create(t.admin.token, body(9))
    expect(a.body.execution_id).not.toBe(b.body.execution_id)
    expect(sessionCount()).toBe(before + 2)
  })
})
