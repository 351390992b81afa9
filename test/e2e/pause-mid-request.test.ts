import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * Pause on gVisor while the CLI waits on the model: the relay holds an open connection then, which
 * a 2022 runsc checkpoint cannot save. Every pause must keep the turn (a freeze when a checkpoint
 * cannot be taken), and every resume must give it back: 20 pauses in a row, each landing while a
 * model request is in flight (every fourth lasting past the reply), over TURNS turns of PER_TURN
 * model requests; every turn completes with its own answer and the generation goes up by one on
 * each resume.
 */
const TURNS = 2
const PER_TURN = 10
/** How long the model takes to answer each request: the pause lands inside it. */
const MODEL_MS = 600

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
      // Every fourth pause lasts past the model's reply, which then comes while the sandbox is
      // frozen: gVisor lost such bytes, and the CLI waited for the rest of its reply for ever.
      if (asked % 4 === 0) await Bun.sleep(MODEL_MS + 300)
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
