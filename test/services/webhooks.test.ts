import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { eq } from 'drizzle-orm'
import { Webhook } from 'standardwebhooks'
import { openDb } from '../../src/db/client'
import { sessions, webhookDeliveries } from '../../src/db/schema'
import type { SessionStatus } from '../../src/domain/status'
import { ApiKeyService } from '../../src/api-keys/service'
import { IdentityService, type Principal } from '../../src/identity/service'
import { SessionStore, type SessionPatch, type SessionRow } from '../../src/session-record/store'
import { SESSION_MACHINE_VERSION } from '../../machines/session.machine'
import { webhookUrlProblem } from '../../src/webhooks/url-policy'
import type { LogFields } from '../../src/domain/log'
import { INLINE_RESULT_BYTES, WebhookService, type WebhookDeps } from '../../src/webhooks/service'
import { waitFor } from '../helpers/http'
import { startReceiver } from '../helpers/keys'

/**
 * The outbox and the dispatcher on a real database and real receivers on 127.0.0.1, with the
 * turn's end committed through the session store's own transaction, as the session service does. (test/http/webhooks.test.ts does the same through real runs.)
 */

const SCALE = 0.005 // retries at 600 ms, 1.2 s and 1.8 s after the first attempt
const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true })
})

function world(deps: Partial<WebhookDeps> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-webhooks-'))
  dirs.push(dir)
  const database = openDb(join(dir, 'agentd.db'))
  const { db } = database
  const identity = new IdentityService(db)
  identity.createOrg('acme')
  const admin = identity.createUser('acme', 'admin@acme.test', 'admin')
  const principal = identity.userByToken(admin.token) as Principal
  const access = identity.orgAccess(principal, 'acme')!
  const webhooks = new WebhookService({
    db,
    publicUrl: 'https://agentd.example',
    allowPrivate: true,
    timeScale: SCALE,
    log: () => {},
    ...deps,
  })
  const keys = new ApiKeyService(db, webhooks)
  webhooks.start()

  /** A key with a webhook to `url`; returns its id and webhook secret. */
  async function keyWithHook(url: string, body: { expires_at?: string } = {}) {
    const key = keys.create(principal, access, { name: 'hooks', ...body })
    const updated = await keys.update(principal, access, key.id, { webhook_url: url })
    return { id: key.id, whsec: updated.webhook_secret! }
  }

  const store = new SessionStore(db, Date.now)

  /** A running session of the key, as create leaves it (row, snapshot and all, through the store). */
  function startRun(apiKeyId: string | null, extra: Partial<SessionRow> = {}): string {
    const id = crypto.randomUUID()
    const now = Date.now()
    const row = {
      id,
      orgId: access.orgId,
      apiKeyId,
      agent: 'harness_1',
      harness: 'harness_1',
      status: 'running',
      mode: 'headless',
      persistenceMode: 'resumable',
      prompt: 'p',
      title: 'p',
      model: 'scripted',
      createdAt: now,
      updatedAt: now,
      ...extra,
    } as const
    store.insert(row, { value: 'running' }, SESSION_MACHINE_VERSION, [])
    return id
  }

  /**
   * Ends the turn through the store's commit, the transaction SessionService.transit uses: the row
   * update, and the hook among the transition's own writes, commit or roll back together.
   */
  function endTurn(id: string, to: SessionStatus, patch: SessionPatch = {}, from: SessionStatus = 'running') {
    const full: SessionPatch =
      to === 'cancelled'
        ? patch
        : { completedAt: Date.now(), hasResult: true, resultText: 'done', totalCostUsd: 0.25, turnsCount: 1, ...patch }
    const before = store.get(id)!
    const stored = store.snapshotOf(id)!
    store.commit(id, stored.version, stored.snapshot, to, full, [], () => webhooks.turnEnded({ row: before, from, to, patch: full }))
    return full.completedAt ?? store.get(id)!.updatedAt
  }

  const delivery = (id: string) => db.select().from(webhookDeliveries).where(eq(webhookDeliveries.id, id)).get()
  return {
    db,
    store,
    keys,
    webhooks,
    principal,
    access,
    keyWithHook,
    startRun,
    endTurn,
    delivery,
    async close() {
      await webhooks.stop()
      database.close()
    },
  }
}

describe('runFinished delivery', () => {
  let w: ReturnType<typeof world>
  beforeAll(() => {
    w = world()
  })
  afterAll(() => w.close())

  test('one signed POST per turn, verified by standardwebhooks; body and headers as spec 6.2', async () => {
    const rx = startReceiver()
    const key = await w.keyWithHook(rx.url)
    const id = w.startRun(key.id, { projectId: null })
    const endedAt = w.endTurn(id, 'completed', { resultStructured: { ok: true } })
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 1,
    )
    const hook = rx.requests[0]!
    expect(hook.headers['webhook-id']).toBe(`webhook:${id}:${endedAt}`)
    expect(hook.headers['content-type']).toBe('application/json')
    expect(Math.abs(Number(hook.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(5)
    expect(hook.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/)
    const body = new Webhook(key.whsec).verify(hook.body, hook.headers) as any
    expect(body).toEqual({
      type: 'run.completed',
      timestamp: new Date(endedAt).toISOString(),
      data: {
        run_id: id,
        project_id: null,
        status: 'completed',
        result: { text: 'done', structured: { ok: true }, schema_valid: null },
        total_cost_usd: 0.25,
        result_url: `https://agentd.example/o/acme/p/_/sessions/${id}/result`,
        events_url: `https://agentd.example/o/acme/p/_/sessions/${id}/events`,
        artifacts_url: `https://agentd.example/o/acme/p/_/sessions/${id}/artifacts`,
        branch: null,
        pr_url: null,
      },
    })
    // A wrong secret or a changed body does not verify.
    expect(() => new Webhook(`whsec_${Buffer.from('x'.repeat(32)).toString('base64')}`).verify(hook.body, hook.headers)).toThrow()
    expect(() => new Webhook(key.whsec).verify(hook.body.replace('done', 'DONE'), hook.headers)).toThrow()
    // Marked delivered once the receiver's answer is in; then nothing more comes.
    await waitFor(
      async () => w.delivery(hook.headers['webhook-id']!)?.state,
      (state) => state === 'delivered',
    )
    await Bun.sleep(300)
    expect(rx.requests).toHaveLength(1)
    expect(w.delivery(hook.headers['webhook-id']!)).toMatchObject({ state: 'delivered', attempts: 1 })
    rx.stop()
  })

  test("a turn that pushed its changes carries the branch and the pull request (beyond spec 6.2's fields)", async () => {
    const rx = startReceiver()
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed', { branch: 'agentd/0123abcd', prUrl: 'https://github.com/acme/app/pull/7' })
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 1,
    )
    expect(JSON.parse(rx.requests[0]!.body).data).toMatchObject({ branch: 'agentd/0123abcd', pr_url: 'https://github.com/acme/app/pull/7' })
    rx.stop()
  })

  test('each turn of a resumable run is its own delivery; the same turn is enqueued once', async () => {
    const rx = startReceiver()
    const key = await w.keyWithHook(rx.url)
    const id = w.startRun(key.id)
    const first = w.endTurn(id, 'completed')
    // The same turn reported twice (e.g. a replayed event) does not make a second delivery.
    w.endTurn(id, 'completed', { completedAt: first })
    await Bun.sleep(5)
    w.db.update(sessions).set({ status: 'running' }).where(eq(sessions.id, id)).run()
    const second = w.endTurn(id, 'input_required', { resultText: 'second answer', turnsCount: 2 }, 'running')
    await waitFor(
      async () => rx.requests.length,
      (n) => n >= 2,
    )
    await Bun.sleep(200)
    // Two deliveries, one per turn; they may arrive in either order (each has its own request).
    expect(rx.requests.map((r) => r.headers['webhook-id']).sort()).toEqual([`webhook:${id}:${first}`, `webhook:${id}:${second}`].sort())
    const secondHook = rx.requests.find((r) => r.headers['webhook-id'] === `webhook:${id}:${second}`)!
    const body = new Webhook(key.whsec).verify(secondHook.body, secondHook.headers) as any
    // An interactive turn that ended normally is a completed turn (the body keeps to the spec's four statuses).
    expect(body.type).toBe('run.completed')
    expect(body.data.status).toBe('completed')
    expect(body.data.result.text).toBe('second answer')
    rx.stop()
  })

  test('type and status mapping: needs_review, failed, cancelled', async () => {
    const rx = startReceiver()
    const key = await w.keyWithHook(rx.url)
    const cases: [SessionStatus, SessionPatch, string, string][] = [
      ['needs_review', { outputSchema: { type: 'object' }, schemaValid: false }, 'run.completed', 'needs_review'],
      ['failed', { error: 'model error', hasResult: false, resultText: null }, 'run.failed', 'failed'],
      ['cancelled', {}, 'run.cancelled', 'cancelled'],
    ]
    for (const [to, patch] of cases) w.endTurn(w.startRun(key.id), to, patch)
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 3,
    )
    const seen = rx.requests.map((r) => new Webhook(key.whsec).verify(r.body, r.headers) as any).map((b) => [b.type, b.data.status])
    expect(seen.sort()).toEqual(cases.map(([, , type, status]) => [type, status]).sort())
    rx.stop()
  })

  test(`a result over ${INLINE_RESULT_BYTES / 1024} KiB is sent as null (read result_url instead)`, async () => {
    const rx = startReceiver()
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed', { resultText: 'x'.repeat(INLINE_RESULT_BYTES) })
    w.endTurn(w.startRun(key.id), 'completed', { resultText: 'y'.repeat(INLINE_RESULT_BYTES - 100) })
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 2,
    )
    const results = rx.requests.map((r) => (JSON.parse(r.body) as any).data.result).sort((a, b) => (a === null ? -1 : b === null ? 1 : 0))
    expect(results[0]).toBeNull()
    expect(results[1].text).toHaveLength(INLINE_RESULT_BYTES - 100)
    rx.stop()
  })

  test('no delivery for a run not started by a key, a key without a webhook, or a key expired at the turn’s end', async () => {
    const rx = startReceiver()
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(null), 'completed')
    const bare = w.keys.create(w.principal, w.access, { name: 'no hook' })
    w.endTurn(w.startRun(bare.id), 'completed')
    const soon = await w.keyWithHook(rx.url, { expires_at: new Date(Date.now() + 300).toISOString() })
    const late = w.startRun(soon.id)
    await Bun.sleep(400)
    w.endTurn(late, 'completed')
    // A control delivery proves the worker ran meanwhile.
    const control = w.startRun(key.id)
    w.endTurn(control, 'completed')
    await waitFor(
      async () => rx.requests.length,
      (n) => n >= 1,
    )
    await Bun.sleep(300)
    expect(rx.requests.map((r) => (JSON.parse(r.body) as any).data.run_id)).toEqual([control])
    rx.stop()
  })
})

describe('retries', () => {
  let w: ReturnType<typeof world>
  /** The server log's lines with their fields, as main.ts writes them as JSON. */
  const logged: { line: string; fields?: LogFields }[] = []
  beforeAll(() => {
    w = world({ log: (line, fields) => logged.push({ line, fields }) })
  })
  afterAll(() => w.close())

  test('failing twice then 200: three attempts with the same webhook-id, at the scaled 2 and 4 minutes', async () => {
    const rx = startReceiver((n) => (n <= 2 ? 500 : 200))
    const key = await w.keyWithHook(rx.url)
    const id = w.startRun(key.id)
    w.endTurn(id, 'completed')
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 3,
      10_000,
    )
    // The third attempt is recorded once its answer is in.
    await waitFor(
      async () => w.keys.deliveries(w.access, key.id, 1).data[0]?.state,
      (state) => state === 'delivered',
      10_000,
    )
    await Bun.sleep(2_000 * SCALE * 60) // past the third retry's slot: nothing more comes
    expect(rx.requests).toHaveLength(3)
    const ids = new Set(rx.requests.map((r) => r.headers['webhook-id']))
    expect(ids.size).toBe(1)
    for (const r of rx.requests) expect(() => new Webhook(key.whsec).verify(r.body, r.headers)).not.toThrow()
    const deliveries = w.keys.deliveries(w.access, key.id, 10).data
    // Each attempt's start on the server's clock: the receiver's clock adds how late each request
    // arrived, which a loaded machine makes uneven.
    const [a, b, c] = deliveries[0]!.attempts.map((x) => Date.parse(x.attempted_at))
    expect(b! - a!).toBeGreaterThanOrEqual(2 * 60_000 * SCALE)
    expect(c! - a!).toBeGreaterThanOrEqual(4 * 60_000 * SCALE)
    expect(deliveries).toHaveLength(1)
    expect(deliveries[0]!.state).toBe('delivered')
    expect(deliveries[0]!.attempts.map((x) => x.status_code)).toEqual([500, 500, 200])
    for (const attempt of deliveries[0]!.attempts) expect(attempt.latency_ms).toBeGreaterThanOrEqual(0)
    // One structured log line per attempt: the delivery, its number, the answer and how long it took.
    const lines = logged.filter((l) => l.fields?.delivery === deliveries[0]!.id)
    expect(lines.map((l) => [l.fields!.session, l.fields!.attempt, l.fields!.status, l.fields!.outcome])).toEqual([
      [id, 1, 500, 'retrying'],
      [id, 2, 500, 'retrying'],
      [id, 3, 200, 'delivered'],
    ])
    for (const l of lines) expect(l.fields!.duration_ms).toBeGreaterThanOrEqual(0)
    expect(lines.some((l) => l.line.includes(rx.url))).toBe(false)
    rx.stop()
  })

  test('never a 2xx: four attempts (2, 4 and 6 minutes after the first), then dropped as failed', async () => {
    const rx = startReceiver(() => 503)
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => w.keys.deliveries(w.access, key.id, 1).data[0]?.state,
      (s) => s === 'failed',
      10_000,
    )
    await Bun.sleep(600)
    expect(rx.requests).toHaveLength(4)
    const delivery = w.keys.deliveries(w.access, key.id, 1).data[0]!
    // Attempt starts on the server's clock (the receiver's adds each request's own lateness).
    const [first, ...rest] = delivery.attempts.map((x) => Date.parse(x.attempted_at))
    expect(rest).toHaveLength(3)
    rest.forEach((at, i) => expect(at - first!).toBeGreaterThanOrEqual((i + 1) * 2 * 60_000 * SCALE))
    expect(delivery.reason).toContain('4 attempts')
    rx.stop()
  })

  test('a 3xx is a failure and is never followed, to a local receiver or to the metadata address', async () => {
    const target = startReceiver()
    const rx = startReceiver((n) =>
      n === 1 ? Response.redirect(target.url, 307) : n === 2 ? Response.redirect('http://169.254.169.254/latest/meta-data/', 302) : 200,
    )
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => w.keys.deliveries(w.access, key.id, 1).data[0]?.state,
      (s) => s === 'delivered',
      10_000,
    )
    expect(target.requests).toHaveLength(0)
    const attempts = w.keys.deliveries(w.access, key.id, 1).data[0]!.attempts
    expect(attempts.map((a) => a.status_code)).toEqual([307, 302, 200])
    expect(attempts[0]!.error).toBe(`redirect refused (to ${target.url})`)
    expect(attempts[1]!.error).toBe('redirect refused (to http://169.254.169.254/latest/meta-data/)')
    rx.stop()
    target.stop()
  })

  test('revoking the key during retries drops them', async () => {
    const rx = startReceiver(() => 500)
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 1,
    )
    w.keys.revoke(w.access, key.id)
    await Bun.sleep(6 * 60_000 * SCALE + 500)
    expect(rx.requests).toHaveLength(1)
    const delivery = w.keys.deliveries(w.access, key.id, 1).data[0]!
    expect(delivery.state).toBe('dropped')
    expect(delivery.reason).toBe('key revoked')
    rx.stop()
  })

  test('clearing the webhook drops pending retries; changing the URL sends them to the new one', async () => {
    const rx = startReceiver(() => 500)
    const next = startReceiver(() => 200)
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 1,
    )
    await w.keys.update(w.principal, w.access, key.id, { webhook_url: next.url })
    await waitFor(
      async () => next.requests.length,
      (n) => n === 1,
      5_000,
    )
    expect(next.requests[0]!.headers['webhook-id']).toBe(rx.requests[0]!.headers['webhook-id']!)
    // The secret was kept when the URL changed.
    expect(() => new Webhook(key.whsec).verify(next.requests[0]!.body, next.requests[0]!.headers)).not.toThrow()

    const cleared = startReceiver(() => 500)
    await w.keys.update(w.principal, w.access, key.id, { webhook_url: cleared.url })
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => cleared.requests.length,
      (n) => n >= 1,
      5_000,
    )
    await w.keys.update(w.principal, w.access, key.id, { webhook_url: null })
    await Bun.sleep(6 * 60_000 * SCALE + 300)
    expect(cleared.requests).toHaveLength(1)
    const latest = w.keys.deliveries(w.access, key.id, 1).data[0]!
    expect(latest).toMatchObject({ state: 'dropped', reason: 'webhook cleared' })
    for (const r of [rx, next, cleared]) r.stop()
  })

  test('a receiver that has not answered after 5 s counts as a failure; the retry is sent', async () => {
    const rx = startReceiver((n) => (n === 1 ? 'hang' : 200), 7_000)
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => w.keys.deliveries(w.access, key.id, 1).data[0]?.state,
      (s) => s === 'delivered',
      15_000,
    )
    const [hung, ok] = w.keys.deliveries(w.access, key.id, 1).data[0]!.attempts
    expect(hung!.status_code).toBeNull()
    expect(hung!.error).toContain('no answer within 5 s')
    expect(hung!.latency_ms).toBeGreaterThanOrEqual(4_990)
    expect(hung!.latency_ms).toBeLessThan(6_000)
    expect(ok!.status_code).toBe(200)
    expect(rx.requests).toHaveLength(2)
    rx.stop()
  }, 30_000)
})

describe('outbox atomicity and restarts', () => {
  test('a rolled-back status change leaves no delivery', async () => {
    const w = world()
    const rx = startReceiver()
    const key = await w.keyWithHook(rx.url)
    const id = w.startRun(key.id)
    // The store's commit, with the hook among its writes and a failure after it: all of it rolls back.
    const before = w.store.get(id)!
    const stored = w.store.snapshotOf(id)!
    expect(() =>
      w.store.commit(id, stored.version, stored.snapshot, 'completed', { completedAt: 1 }, [], () => {
        w.webhooks.turnEnded({ row: before, from: 'running', to: 'completed', patch: { completedAt: 1 } })
        throw new Error('a later write failed')
      }),
    ).toThrow('a later write failed')
    expect(w.store.get(id)!.status).toBe('running')
    await Bun.sleep(200)
    expect(rx.requests).toHaveLength(0)
    expect(w.delivery(`webhook:${id}:1`)).toBeUndefined()
    rx.stop()
    await w.close()
  })

  test('a dispatcher started on the same database delivers what the stopped one left pending', async () => {
    const rx = startReceiver((n) => (n === 1 ? 500 : 200))
    const w = world()
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 1,
    )
    await Bun.sleep(50)
    await w.webhooks.stop()
    await Bun.sleep(2 * 60_000 * SCALE + 100)
    expect(rx.requests).toHaveLength(1)
    const again = new WebhookService({ db: w.db, publicUrl: 'https://agentd.example', allowPrivate: true, timeScale: SCALE, log: () => {} })
    again.start()
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 2,
    )
    expect(rx.requests[1]!.headers['webhook-id']).toBe(rx.requests[0]!.headers['webhook-id']!)
    await waitFor(
      async () => w.keys.deliveries(w.access, key.id, 1).data[0]?.state,
      (s) => s === 'delivered',
    )
    await again.stop()
    rx.stop()
  })
})

describe('SSRF', () => {
  const fixed = (table: Record<string, string[]>) => async (host: string) => {
    const found = table[host]
    if (!found) throw new Error(`ENOTFOUND ${host}`)
    return found
  }

  test('refused: literal inside addresses, names resolving inside (also partly), http, unresolvable names', async () => {
    const resolve = fixed({
      'loop.test': ['127.0.0.1'],
      'ten.test': ['10.0.0.1'],
      'meta.test': ['169.254.169.254'],
      'six.test': ['::1'],
      'mixed.test': ['93.184.216.34', '10.0.0.1'],
      'public.test': ['93.184.216.34', '2606:2800:220:1:248:1893:25c8:1946'],
    })
    for (const url of [
      'https://127.0.0.1/hook',
      'https://10.0.0.1/hook',
      'https://169.254.169.254/latest/meta-data',
      'https://[::1]/hook',
      'https://[::ffff:127.0.0.1]/hook',
      'https://2130706433/hook', // 127.0.0.1 as one number
      'https://loop.test/hook',
      'https://ten.test/hook',
      'https://meta.test/hook',
      'https://six.test/hook',
      'https://mixed.test/hook',
      'https://nowhere.test/hook',
      'http://public.test/hook',
      'ftp://public.test/hook',
    ]) {
      expect([url, await webhookUrlProblem(url, false, resolve)]).not.toEqual([url, null])
    }
    expect(await webhookUrlProblem('https://public.test/hook?x=1', false, resolve)).toBeNull()
    // The real resolver: `localhost` is this machine.
    expect(
      await webhookUrlProblem('https://localhost:8443/hook', false, (h) =>
        import('../../src/egress/address-policy').then((m) => m.resolveHost(h)),
      ),
    ).toContain('non-public')
    // AGENTD_WEBHOOK_ALLOW_PRIVATE lifts it (tests only).
    expect(await webhookUrlProblem('http://127.0.0.1:9/hook', true, resolve)).toBeNull()
  })

  test('a URL stored while private addresses were allowed is refused at delivery once they are not', async () => {
    const rx = startReceiver()
    const lax = world()
    const key = await lax.keyWithHook(rx.url)
    await lax.webhooks.stop()
    const strict = new WebhookService({
      db: lax.db,
      publicUrl: 'https://agentd.example',
      allowPrivate: false,
      timeScale: SCALE,
      log: () => {},
    })
    strict.start()
    lax.endTurn(lax.startRun(key.id), 'completed')
    const first = await waitFor(async () => lax.keys.deliveries(lax.access, key.id, 1).data[0]?.attempts[0], Boolean)
    expect(first!.error).toContain('refused')
    expect(rx.requests).toHaveLength(0)
    await strict.stop()
    rx.stop()
  })

  test('at delivery time the name is resolved again: a name rebound to 127.0.0.1 is refused and nothing is sent', async () => {
    const rx = startReceiver()
    const port = new URL(rx.url).port
    let answer = ['93.184.216.34']
    const w = world({ allowPrivate: false, resolve: async () => answer })
    const key = await w.keyWithHook(`https://rebind.test:${port}/hook`)
    answer = ['127.0.0.1']
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => w.keys.deliveries(w.access, key.id, 1).data[0]?.attempts.length ?? 0,
      (n) => n >= 1,
    )
    const attempt = w.keys.deliveries(w.access, key.id, 1).data[0]!.attempts[0]!
    expect(attempt.status_code).toBeNull()
    expect(attempt.error).toContain('non-public address (127.0.0.1)')
    expect(rx.requests).toHaveLength(0)
    rx.stop()
    await w.close()
  })
})

describe('a graceful stop', () => {
  test('sends what is due and lets attempts in flight finish before its deadline; a stop without one aborts them, and they stay pending', async () => {
    const rx = startReceiver(() => 'hang', 400)
    const w = world()
    const key = await w.keyWithHook(rx.url)
    w.endTurn(w.startRun(key.id), 'completed')
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 1,
    )
    // A second turn ends just before the stop: due, not yet sent.
    w.endTurn(w.startRun(key.id), 'failed', { error: 'boom' })
    await w.webhooks.stop(Date.now() + 10_000)
    expect(rx.requests).toHaveLength(2)
    const states = w.keys.deliveries(w.access, key.id, 5).data.map((d) => [d.state, d.attempts.length])
    expect(states).toEqual([
      ['delivered', 1],
      ['delivered', 1],
    ])

    // Without a deadline: the attempt under way is cut and left for the next process.
    const slow = startReceiver(() => 'hang', 2_000)
    const v = world()
    const other = await v.keyWithHook(slow.url)
    v.endTurn(v.startRun(other.id), 'completed')
    await waitFor(
      async () => slow.requests.length,
      (n) => n === 1,
    )
    await v.webhooks.stop() // had it waited for the answer (200, in 2 s), the delivery would be delivered
    expect(v.keys.deliveries(v.access, other.id, 5).data.map((d) => [d.state, d.attempts.length])).toEqual([['pending', 0]])
    await w.close()
    await v.close()
    rx.stop()
    slow.stop()
  })
})
