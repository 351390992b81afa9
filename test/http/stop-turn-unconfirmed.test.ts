import { afterAll, beforeAll, expect, test } from 'bun:test'
import type { ExecOptions, SandboxHandle, SandboxProcess } from '../../sandbox/driver'
import { ProcessDriver } from '../../sandbox/process'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * The process driver, except that signals to the turn's CLI are swallowed until the test lets
 * them through: the CLI then behaves like one stuck in uninterruptible sleep (a hung disk or
 * mount), the one case in which it outlives SIGKILL, which this kernel gives no way to cause.
 */
class DeafDriver extends ProcessDriver {
  deaf = true
  readonly held: { process: SandboxProcess; signals: NodeJS.Signals[] }[] = []

  constructor() {
    super({ scope: `deaf-${crypto.randomUUID().slice(0, 8)}` })
  }

  override exec(handle: SandboxHandle, argv: string[], options: ExecOptions): SandboxProcess {
    const process = super.exec(handle, argv, options)
    const entry = { process, signals: [] as NodeJS.Signals[] }
    this.held.push(entry)
    return {
      ...process,
      kill: (signal: NodeJS.Signals = 'SIGKILL') => {
        if (this.deaf) entry.signals.push(signal)
        else process.kill(signal)
      },
    }
  }

  /** Lets signals through again and delivers the last one swallowed. */
  hear(): void {
    this.deaf = false
    for (const { process, signals } of this.held) if (signals.length) process.kill(signals.at(-1))
  }
}

const driver = new DeafDriver()
let t: TestApp
beforeAll(async () => {
  t = await makeTestApp({}, { driver })
})
afterAll(() => t[Symbol.asyncDispose]())

const path = (id: string, rest = '') => `/o/acme/p/_/sessions/${id}${rest}`
const call = (method: string, url: string, body?: unknown) => t.app.handle(req(method, url, { token: t.admin.token, body }))
const get = async (id: string) => json(await call('GET', path(id)))

test('stop_turn answers 422 STOP_TURN_UNCONFIRMED when the CLI outlives SIGINT and SIGKILL for 10 s; the turn ends when it finally dies', async () => {
  const created = await call('POST', '/o/acme/p/_/sessions', {
    agent: 'harness_1',
    prompt: script([{ sleep: 60_000 }, { answer: 'never' }]),
  })
  const id = (await json(created)).execution_id as string
  await waitFor(async () => t.store.allEvents(id).some((e) => e.type === 'init'), Boolean)

  const res = await call('PATCH', path(id), { status: 'stop_turn' })
  expect(res.status).toBe(422)
  expect(await json(res)).toMatchObject({ code: 'STOP_TURN_UNCONFIRMED', error: expect.any(String) })
  // SIGINT first, as a user at the terminal would, then SIGKILL: both were sent, neither took.
  expect(driver.held.flatMap((h) => h.signals)).toEqual(['SIGINT', 'SIGKILL'])
  expect((await get(id)).status).toBe('running')

  driver.hear()
  const after = await waitFor(
    () => get(id),
    (s) => s.status !== 'running',
  )
  expect(after.status).toBe('completed')
  expect((await json(await call('GET', path(id, '/result')))).result).toBeNull()
}, 30_000)
