import { removeDataDir } from '../helpers/cleanup'
import { afterAll, expect, test } from 'bun:test'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Webhook } from 'standardwebhooks'
import { script } from '../helpers/http'
import { startReceiver } from '../helpers/keys'
import { admin, startServer, type RunningServer } from '../helpers/server'
import { waitFor } from '../helpers/poll'

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await removeDataDir(dir)
})

test('kill -9 between webhook attempts: the restarted server sends the retry with the same webhook-id', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-webhook-restart-'))
  dirs.push(dir)
  await admin(dir, 'org', 'create', 'acme')
  const token = (await admin(dir, 'user', 'create', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'admin')).json.token
  // Retries 2.4 s, 4.8 s and 7.2 s after the first attempt.
  const env = { DATA_DIR: dir, AGENTD_SANDBOX: 'process', AGENTD_WEBHOOK_ALLOW_PRIVATE: '1', AGENTD_TIME_SCALE: '0.02' }
  const rx = startReceiver((n) => (n === 1 ? 500 : 200))
  let server: RunningServer = await startServer(env)
  const call = async (method: string, path: string, bearer: string, body?: unknown) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  try {
    const key = (await call('POST', '/o/acme/api-keys', token, { name: 'restart' })).body
    const whsec = (await call('PATCH', `/o/acme/api-keys/${key.id}`, token, { webhook_url: rx.url })).body.webhook_secret
    const run = await call('POST', '/o/acme/p/_/sessions', key.secret, { agent: 'harness_2', prompt: script([{ answer: 'survives' }]) })
    expect(run.status).toBe(202)
    const deliveries = () => call('GET', `/o/acme/api-keys/${key.id}/deliveries`, token).then((r) => r.body.data)
    // The first attempt failed (500) and is on record; the retry is still pending.
    await waitFor(deliveries, (d) => d[0]?.attempts.length === 1, 50_000)
    expect(rx.requests).toHaveLength(1)
    await server.stop('SIGKILL')

    server = await startServer(env)
    await waitFor(
      async () => rx.requests.length,
      (n) => n === 2,
      20_000,
    )
    const after = await waitFor(deliveries, (d) => d[0]?.state === 'delivered')
    expect(after).toHaveLength(1)
    expect(after[0].attempts.map((a: { status_code: number }) => a.status_code)).toEqual([500, 200])
    const [first, second] = rx.requests
    expect(second!.headers['webhook-id']).toBe(first!.headers['webhook-id']!)
    expect(second!.headers['webhook-id']).toBe(
      `webhook:${run.body.execution_id}:${Date.parse((await call('GET', `/o/acme/p/_/sessions/${run.body.execution_id}/result`, token)).body.completed_at)}`,
    )
    // Retried on schedule (2 minutes after the first attempt, scaled), not early: the attempts' own
    // start times, both on the server's clock (the receiver's add each request's delivery time).
    const [firstAt, secondAt] = after[0].attempts.map((a: { attempted_at: string }) => Date.parse(a.attempted_at))
    expect(secondAt - firstAt).toBeGreaterThanOrEqual(2 * 60_000 * 0.02)
    expect(second!.body).toBe(first!.body)
    expect(() => new Webhook(whsec).verify(second!.body, second!.headers)).not.toThrow()
    await Bun.sleep(500)
    expect(rx.requests).toHaveLength(2)
  } finally {
    await server.stop()
    rx.stop()
  }
}, 120_000)

test('kill -9 mid-turn with a follow-up queued, and mid-turn while paused: every turn the kill ended is delivered once, as failed, besides the turns after it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-webhook-lost-turn-'))
  dirs.push(dir)
  await admin(dir, 'org', 'create', 'acme')
  const token = (await admin(dir, 'user', 'create', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'admin')).json.token
  const env = { DATA_DIR: dir, AGENTD_SANDBOX: 'bwrap', AGENTD_WEBHOOK_ALLOW_PRIVATE: '1', AGENTD_TIME_SCALE: '0.02' }
  const rx = startReceiver()
  let server: RunningServer = await startServer(env)
  const call = async (method: string, path: string, bearer: string, body?: unknown) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    return { status: res.status, body: (await res.json()) as any }
  }
  const hooksOf = (id: string) => rx.requests.map((r) => JSON.parse(r.body)).filter((b) => b.data.run_id === id)
  try {
    const key = (await call('POST', '/o/acme/api-keys', token, { name: 'lost-turns' })).body
    expect((await call('PATCH', `/o/acme/api-keys/${key.id}`, token, { webhook_url: rx.url })).status).toBe(200)
    // One run whose turn is cut by the kill with a follow-up waiting; one whose turn is cut while paused.
    const long = script([{ say: 'working' }, { sleep: 60_000 }, { answer: 'never' }])
    const queued = (await call('POST', '/o/acme/p/_/sessions', key.secret, { agent: 'harness_2', prompt: long })).body
      .execution_id as string
    const paused = (await call('POST', '/o/acme/p/_/sessions', key.secret, { agent: 'harness_2', prompt: long })).body
      .execution_id as string
    const view = (id: string) => call('GET', `/o/acme/p/_/sessions/${id}`, key.secret).then((r) => r.body)
    await waitFor(
      () => view(queued),
      (v) => v.status === 'running',
      60_000,
    )
    await waitFor(
      () => view(paused),
      (v) => v.status === 'running',
      60_000,
    )
    expect(
      (await call('POST', `/o/acme/p/_/sessions/${queued}/messages`, key.secret, { content: script([{ answer: 'after the restart' }]) }))
        .status,
    ).toBe(202)
    expect([200, 202]).toContain((await call('PATCH', `/o/acme/p/_/sessions/${paused}`, key.secret, { status: 'paused' })).status)
    await waitFor(
      () => view(paused),
      (v) => v.status === 'paused',
      60_000,
    )
    await server.stop('SIGKILL')

    server = await startServer(env)
    // The queued follow-up ran after the restart; the paused run rests paused, its turn lost.
    await waitFor(
      () => view(queued),
      (v) => v.status === 'completed' && v.turns_count === 2,
      60_000,
    )
    await waitFor(
      async () => hooksOf(queued).length,
      (n) => n === 2,
      30_000,
    )
    await waitFor(
      async () => hooksOf(paused).length,
      (n) => n === 1,
      30_000,
    )
    expect(
      hooksOf(queued)
        .map((b) => b.type)
        .sort(),
    ).toEqual(['run.completed', 'run.failed'])
    expect(hooksOf(paused).map((b) => b.type)).toEqual(['run.failed'])
    await Bun.sleep(500)
    expect(new Set(rx.requests.map((r) => r.headers['webhook-id'])).size).toBe(rx.requests.length)
  } finally {
    await server.stop()
    rx.stop()
  }
}, 180_000)
