import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { removeDataDir } from '../helpers/cleanup'
import { json, req, script, waitFor } from '../helpers/http'
import { client, seededDataDir, startServer } from '../helpers/server'
import { settled } from '../helpers/sessions'

/**
 * Pause on gVisor while the CLI waits on the model: the relay holds an open connection then, which
 * a 2022 runsc checkpoint cannot save. Every pause must keep the turn (a freeze when a checkpoint
 * cannot be taken), and every resume must give it back: 20 pauses in a row, each landing while a
 * model request is in flight (half of them lasting past the reply), over TURNS turns of PER_TURN
 * model requests; every turn completes with its own answer and the generation goes up by one on
 * each resume.
 */
const TURNS = 2
const PER_TURN = 10
/** How long the model takes to answer each request: the pause lands inside it. */
const MODEL_MS = 700

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp({ AGENTD_SANDBOX: 'gvisor' })
})
afterAll(() => t[Symbol.asyncDispose]())

const path = (id: string, rest = '') => `/o/acme/p/_/sessions/${id}${rest}`
const call = (method: string, url: string, body?: unknown) => t.app.handle(req(method, url, { token: t.admin.token, body }))
const get = async (id: string) => json(await call('GET', path(id)))
const logs = async (id: string): Promise<string> => (await json(await call('GET', path(id, '/logs')))).logs ?? ''
/** Model requests that reached the gateway (its arrival lines in the session log). */
const requests = (text: string) => text.split('\n').filter((line) => line.includes(' gateway: POST ') && !line.includes(' answered ')).length
/** A turn of PER_TURN model requests, each answered after MODEL_MS: a shell call each, then the answer. */
const turn = (n: number) =>
  script([...Array.from({ length: PER_TURN - 1 }, (_, i) => [{ sleep: MODEL_MS }, { bash: `echo ${n}.${i}` }]).flat(), { sleep: MODEL_MS }, { answer: `answer ${n}` }])

test(`${TURNS * PER_TURN} pauses on gVisor, each while a model request is in flight: every turn completes with its answer, the generation up by one per resume`, async () => {
  const created = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: turn(1) })
  expect(created.status).toBe(202)
  const id = (await json(created)).execution_id as string
  let generation = 0
  let asked = 0
  for (let n = 1; n <= TURNS; n++) {
    if (n > 1) {
      expect((await call('POST', path(id, '/messages'), { content: turn(n) })).status).toBe(200)
      // The follow-up wakes the sandbox the last turn left parked: that is a resume too.
      await waitFor(
        () => get(id),
        (s) => s.sandbox_generation === generation + 1,
        30_000,
      )
      generation++
    }
    for (let k = 1; k <= PER_TURN; k++) {
      asked++
      await waitFor(
        () => logs(id),
        (text) => requests(text) >= asked,
        60_000,
      ).catch(async (err) => {
        throw new Error(`${(err as Error).message.slice(0, 200)}\nlogs: ${await logs(id)}\nevents: ${t.store.allEvents(id).map((e) => e.type).join(', ')}`)
      })
      expect((await call('PATCH', path(id), { status: 'paused' })).status).toBe(202)
      const paused = await waitFor(
        () => get(id),
        (s) => s.machine_state === 'paused',
        30_000,
      )
      expect(paused.status).toBe('paused')
      expect(paused.sandbox_generation).toBe(generation)
      // Every other pause lasts past the model's reply, which then comes while the sandbox is
      // frozen: gVisor lost such bytes, and the CLI waited for the rest of its reply for ever.
      if (asked % 2 === 0) await Bun.sleep(MODEL_MS + 300)
      expect((await call('PATCH', path(id), { status: 'running' })).status).toBe(202)
      await waitFor(
        () => get(id),
        (s) => s.sandbox_generation === generation + 1,
        30_000,
      )
      generation++
    }
    const done = await waitFor(
      () => get(id),
      (s) => ['completed', 'failed', 'needs_review', 'input_required'].includes(s.status) && s.turns_count === n,
      60_000,
    )
    expect({ n, status: done.status, error: done.error ?? null }).toEqual({ n, status: 'completed', error: null })
    expect((await json(await call('GET', path(id, '/result')))).result.text).toBe(`answer ${n}`)
    expect(await requests(await logs(id))).toBe(asked) // no request was cut and asked again
  }
  expect(generation).toBe(TURNS * PER_TURN + TURNS - 1)
}, 300_000)

test('a server stops, and starts again, with turns paused on gVisor: each paused turn is lost as in a crash, and nothing of it runs on', async () => {
  const { dir, token } = await seededDataDir('agentd-paused-restart')
  const env = { DATA_DIR: dir, AGENTD_SANDBOX: 'gvisor' }
  let server = await startServer(env)
  try {
    const request = client(() => server, token)
    const read = async (id: string) => (await request('GET', `/o/acme/p/_/sessions/${id}`)).body
    const events = async (id: string) => ((await request('GET', `/o/acme/p/_/sessions/${id}/messages`)).body.events ?? []) as { type: string }[] // 404 before the first event
    const pauseWhen = async (id: string, ready: () => Promise<boolean>) => {
      await waitFor(ready, Boolean, 60_000)
      expect((await request('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'paused' })).status).toBe(202)
      await waitFor(() => read(id), (s) => s.machine_state === 'paused', 30_000)
    }
    // One paused while its model request is in flight, one while its shell call runs; the shell
    // call would write late.txt if it were let run on.
    const inRequest = (await request('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: script([{ sleep: 3000 }, { answer: 'never' }]) })).body.execution_id as string
    await pauseWhen(inRequest, async () => ((await request('GET', `/o/acme/p/_/sessions/${inRequest}/logs`)).body.logs ?? '').includes(' gateway: POST '))
    const inTool = (await request('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: script([{ bash: 'sleep 2 && echo late > late.txt' }, { answer: 'never' }]) })).body.execution_id as string
    await pauseWhen(inTool, async () => (await events(inTool)).some((e) => e.type === 'tool_use'))

    await server.stop() // SIGTERM: it must not wait for turns that cannot end while paused
    server = await startServer(env)
    for (const id of [inRequest, inTool]) {
      expect(await read(id)).toMatchObject({ status: 'paused', turns_count: 1 })
      expect((await request('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'running' })).status).toBe(202)
      const after = await waitFor(() => read(id), (s) => s.status !== 'paused', 30_000)
      expect(after.status).toBe('failed')
      expect(after.error).toContain('agentd restarted')
    }
    // The sandbox is the session's still: a follow-up runs in it, and the lost shell call never finished.
    expect((await request('POST', `/o/acme/p/_/sessions/${inTool}/messages`, { content: script([{ bash: 'sleep 3; ls' }, { answer: 'after' }]) })).status).toBe(200)
    const explain = async () =>
      `events: ${(await events(inTool)).map((e) => e.type).join(', ')}\nlogs: ${String((await request('GET', `/o/acme/p/_/sessions/${inTool}/logs`)).body.logs).slice(-2500)}\nserver: ${server.log().slice(-3000)}`
    const done = await settled(() => read(inTool), { turns: 2, timeoutMs: 60_000, explain })
    expect(done.status).toBe('completed')
    const listing = (await events(inTool)).filter((e) => e.type === 'tool_result').map((e) => (e as { output?: string }).output ?? '')
    expect(listing.at(-1)).not.toContain('late.txt')
  } finally {
    await server.stop()
    await removeDataDir(dir)
  }
}, 180_000)
