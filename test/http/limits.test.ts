import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script } from '../helpers/http'
import { settled } from '../helpers/sessions'

// Two servers: the memory limit's turn runs under the default turn timeout, so it never races a
// short one on a busy machine; the wall-time limit's server stops turns after 3 s.
let memory: TestApp
let wallTime: TestApp
beforeAll(async () => {
  memory = await makeTestApp({ AGENTD_SANDBOX_MEMORY_MB: '400' })
  wallTime = await makeTestApp({ AGENTD_TURN_TIMEOUT_S: '3' })
})
afterAll(async () => {
  await memory[Symbol.asyncDispose]()
  await wallTime[Symbol.asyncDispose]()
})

const start = async (t: TestApp, prompt: string) =>
  (await json(await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_2', prompt } }))))
    .execution_id as string
const settledRun = (t: TestApp, id: string) =>
  settled(() => t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token: t.admin.token })).then(json), { timeoutMs: 30_000 })

describe('sandbox limits in a run', () => {
  test('an over-limit memory hog fails its turn with a clear error', async () => {
    // 1 GiB into a 400 MB sandbox: the kernel kills the hog; the turn reports why.
    const id = await start(memory, script([{ bash: 'head -c 1000000000 /dev/zero | tail -n 1 > /dev/null' }, { answer: 'carried on' }]))
    const session = await settledRun(memory, id)
    expect(session.status).toBe('failed')
    expect(session.error).toContain('ran out of memory (limit 400 MB)')
  })

  test('a turn over the wall-time limit is stopped and fails saying so', async () => {
    const id = await start(wallTime, script([{ sleep: 10_000 }, { answer: 'too late' }]))
    const session = await settledRun(wallTime, id)
    expect(session.status).toBe('failed')
    expect(session.error).toContain('ran longer than 3 s')
  })
})
