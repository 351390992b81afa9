import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { Webhook } from 'standardwebhooks'
import { script, waitFor } from '../helpers/http'
import { makeKeyApp, startReceiver, type KeyApp } from '../helpers/keys'

/**
 * The runFinished webhook through real runs: a key run's turn ends, the receiver on 127.0.0.1
 * gets one signed POST, and standardwebhooks' own `verify` accepts it.
 */

const PUBLIC = 'https://agentd.example.com'
let t: KeyApp
let rx: ReturnType<typeof startReceiver>
let key: { id: string; secret: string; whsec: string }
beforeAll(async () => {
  t = await makeKeyApp({ AGENTD_WEBHOOK_ALLOW_PRIVATE: '1', AGENTD_TIME_SCALE: '0.005', AGENTD_PUBLIC_URL: PUBLIC })
  rx = startReceiver()
  const created = (await t.createKey({ name: 'hooks' })).body
  const patched = await t.call('PATCH', `/o/acme/api-keys/${created.id}`, t.admin.token, { webhook_url: rx.url })
  key = { id: created.id, secret: created.secret, whsec: patched.body.webhook_secret }
})
afterAll(async () => {
  rx.stop()
  await t[Symbol.asyncDispose]()
})

/** Codex unless a test names a harness: deliveries are the same for each, and Codex starts fastest. */
const start = async (body: Record<string, unknown>, token = key.secret) => {
  const res = await t.call('POST', '/o/acme/p/_/sessions', token, { agent: 'harness_2', ...body })
  expect(res.status).toBe(202)
  return res.body.execution_id as string
}
const hooksFor = (id: string) => rx.requests.filter((r) => (JSON.parse(r.body) as any).data.run_id === id)
const verified = (hook: { body: string; headers: Record<string, string> }) => new Webhook(key.whsec).verify(hook.body, hook.headers) as any

describe('runFinished through real runs', () => {
  test('one delivery for the turn of a resumable run, signed, with the result read’s answer and completed_at', async () => {
    const id = await start({ prompt: script([{ say: 'working' }, { answer: 'forty-two' }]) })
    await waitFor(
      async () => hooksFor(id).length,
      (n) => n === 1,
      50_000,
    )
    await Bun.sleep(500)
    expect(hooksFor(id)).toHaveLength(1)
    const [hook] = hooksFor(id)
    const result = (await t.call('GET', `/o/acme/p/_/sessions/${id}/result`, key.secret)).body
    expect({ status: result.status, error: result.error ?? null }).toEqual({ status: 'completed', error: null })
    const session = (await t.call('GET', `/o/acme/p/_/sessions/${id}`, key.secret)).body
    expect(session.persistence_mode).toBe('resumable')
    expect(hook!.headers['webhook-id']).toBe(`webhook:${id}:${Date.parse(result.completed_at)}`)
    const body = verified(hook!)
    expect(body).toEqual({
      type: 'run.completed',
      timestamp: result.completed_at,
      data: {
        run_id: id,
        project_id: null,
        status: 'completed',
        result: result.result,
        total_cost_usd: session.total_cost_usd,
        result_url: `${PUBLIC}/o/acme/p/_/sessions/${id}/result`,
        events_url: `${PUBLIC}/o/acme/p/_/sessions/${id}/events`,
        artifacts_url: `${PUBLIC}/o/acme/p/_/sessions/${id}/artifacts`,
        branch: null,
        pr_url: null,
      },
    })
    expect(body.data.result.text).toBe('forty-two')
    // The addresses work with the key (AGENTD_PUBLIC_URL is the base).
    const read = await t.call('GET', body.data.result_url.slice(PUBLIC.length), key.secret)
    expect(read.body.result).toEqual(body.data.result)
    // Recorded as delivered once the receiver's answer is in.
    const deliveries = await waitFor(
      async () =>
        (await t.call('GET', `/o/acme/api-keys/${key.id}/deliveries`, t.admin.token)).body.data as { run_id: string; state: string }[],
      (list) => list.find((d) => d.run_id === id)?.state === 'delivered',
    )
    const mine = deliveries.find((d: { run_id: string }) => d.run_id === id) as any
    expect(mine).toMatchObject({ id: hook!.headers['webhook-id'], state: 'delivered', type: 'run.completed' })
    expect(mine.attempts).toHaveLength(1)
    expect(mine.attempts[0]).toMatchObject({ attempt: 1, status_code: 200, url: rx.url, error: null })
    // First attempt within the spec's ~30 s; how soon is the bench's to measure, not a test's.
    expect(hook!.at - Date.parse(result.completed_at)).toBeLessThan(30_000)
  }, 60_000)

  test('a follow-up turn of the resumable run is a delivery of its own, with its own webhook-id', async () => {
    const id = await start({ prompt: script([{ answer: 'first turn' }]) })
    await waitFor(
      async () => hooksFor(id).length,
      (n) => n === 1,
      50_000,
    )
    const sent = await t.call('POST', `/o/acme/p/_/sessions/${id}/messages`, key.secret, { content: script([{ answer: 'second turn' }]) })
    expect(sent.status).toBe(200)
    await waitFor(
      async () => hooksFor(id).length,
      (n) => n === 2,
      50_000,
    )
    await Bun.sleep(300)
    const [first, second] = hooksFor(id)
    const result = (await t.call('GET', `/o/acme/p/_/sessions/${id}/result`, key.secret)).body
    expect(second!.headers['webhook-id']).toBe(`webhook:${id}:${Date.parse(result.completed_at)}`)
    expect(first!.headers['webhook-id']).not.toBe(second!.headers['webhook-id'])
    expect(verified(first!).data.result.text).toBe('first turn')
    expect(verified(second!).data.result.text).toBe('second turn')
    expect(hooksFor(id)).toHaveLength(2)
  }, 90_000)

  test('a fork made with the key posts one delivery per turn of its own, as any run; forking posts none', async () => {
    const id = await start({ prompt: script([{ answer: 'source turn' }]) })
    await waitFor(
      async () => hooksFor(id).length,
      (n) => n === 1,
      50_000,
    )
    const forked = await t.call('POST', `/o/acme/p/_/sessions/${id}/fork`, key.secret)
    expect(forked.status).toBe(202)
    const fork = forked.body.execution_id as string
    await Bun.sleep(300)
    expect(hooksFor(fork)).toHaveLength(0)
    const sent = await t.call('POST', `/o/acme/p/_/sessions/${fork}/messages`, key.secret, { content: script([{ answer: 'fork turn' }]) })
    expect(sent.status).toBe(200)
    await waitFor(
      async () => hooksFor(fork).length,
      (n) => n === 1,
      50_000,
    )
    await Bun.sleep(300)
    const [hook] = hooksFor(fork)
    expect(verified(hook!).data).toMatchObject({ run_id: fork, status: 'completed', result: { text: 'fork turn' } })
    expect(hooksFor(fork)).toHaveLength(1)
    // The source's own delivery is its one turn's, nothing more.
    expect(hooksFor(id)).toHaveLength(1)
  }, 90_000)

  test('a Project run carries its project_id and Project-scoped addresses', async () => {
    const res = await t.call('POST', '/o/acme/p/web/sessions', key.secret, { prompt: script([{ answer: 'in web' }]) })
    expect(res.status).toBe(202)
    const id = res.body.execution_id
    await waitFor(
      async () => hooksFor(id).length,
      (n) => n === 1,
      50_000,
    )
    const body = verified(hooksFor(id)[0]!)
    expect(body.data.project_id).toBe(res.body.project_id)
    expect(body.data.result_url).toBe(`${PUBLIC}/o/acme/p/${res.body.project_id}/sessions/${id}/result`)
    expect((await t.call('GET', body.data.result_url.slice(PUBLIC.length), key.secret)).status).toBe(200)
  }, 60_000)

  test('a failed turn is run.failed; a cancelled run is run.cancelled', async () => {
    const failing = await start({ prompt: script([{ fail: 'the model gave up' }]) })
    const sleeping = await start({ prompt: script([{ sleep: 60_000 }]) })
    await waitFor(
      () => t.call('GET', `/o/acme/p/_/sessions/${sleeping}`, key.secret),
      (r) => r.body.status === 'running',
      50_000,
    )
    expect((await t.call('PATCH', `/o/acme/p/_/sessions/${sleeping}`, key.secret, { status: 'cancelled' })).status).toBe(200)
    await waitFor(
      async () => hooksFor(failing).length + hooksFor(sleeping).length,
      (n) => n === 2,
      50_000,
    )
    expect(verified(hooksFor(failing)[0]!)).toMatchObject({ type: 'run.failed', data: { status: 'failed' } })
    expect(verified(hooksFor(sleeping)[0]!)).toMatchObject({ type: 'run.cancelled', data: { status: 'cancelled' } })
  }, 60_000)

  test('a failed turn followed at once by a queued follow-up is still run.failed', async () => {
    const id = await start({ prompt: script([{ sleep: 1500 }, { fail: 'broke before the queue ran' }]) })
    await waitFor(
      () => t.call('GET', `/o/acme/p/_/sessions/${id}`, key.secret),
      (r) => r.body.status === 'running',
      50_000,
    )
    const queued = await t.call('POST', `/o/acme/p/_/sessions/${id}/messages`, key.secret, { content: 'try again' })
    expect(queued.status).toBe(202)
    await waitFor(
      async () => hooksFor(id).length,
      (n) => n === 2,
      50_000,
    )
    const [first, second] = hooksFor(id).map(verified)
    expect(first).toMatchObject({ type: 'run.failed', data: { status: 'failed' } })
    // A follow-up that failed too says why (the session's error), not only that it did.
    const error = second.type === 'run.completed' ? null : (await t.call('GET', `/o/acme/p/_/sessions/${id}`, key.secret)).body.error
    expect({ type: second.type, status: second.data.status, error }).toEqual({ type: 'run.completed', status: 'completed', error: null })
  }, 90_000)

  test('no delivery for a run started by a signed-in user', async () => {
    const id = await start({ prompt: script([{ answer: 'by hand' }]) }, t.admin.token)
    await waitFor(
      () => t.call('GET', `/o/acme/p/_/sessions/${id}`, t.admin.token),
      (r) => r.body.status === 'completed',
      50_000,
    )
    // A key run finishing afterwards shows the worker is not merely slow.
    const control = await start({ prompt: script([{ answer: 'control' }]) })
    await waitFor(
      async () => hooksFor(control).length,
      (n) => n === 1,
      50_000,
    )
    expect(hooksFor(id)).toHaveLength(0)
  }, 60_000)
})
