import { afterAll, expect, test } from 'bun:test'
import { existsSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../../sandbox/process'
import { sandboxDir, sandboxSpec } from '../../src/runtime/sandbox-spec'
import { StartSlots } from '../../src/runtime/start-slots'
import { WarmSandboxes } from '../../src/runtime/warm-sandboxes'
import { removeDataDir } from '../helpers/cleanup'
import { waitFor } from '../helpers/http'

/**
 * The warm pool's bookkeeping on a real driver (the process one: its starts are cheap): ids handed
 * out once, a refused create's id given back, a pool refilled to its size, and nothing left after
 * close. test/e2e/warm-sandboxes.test.ts runs sessions on gVisor through it.
 */
const dataDir = mkdtempSync(join(tmpdir(), 'agentd-warm-'))
const driver = new ProcessDriver({ scope: `warm-${process.pid}` })
afterAll(() => removeDataDir(dataDir))

const place = {
  dataDir,
  installerRoot: dataDir,
  gateway: { host: '127.0.0.1', port: 9 },
  limits: { memoryBytes: 1 << 28, maxProcesses: 64 },
}
const logged: string[] = []
const pool = (size: number) =>
  new WarmSandboxes({ driver, starts: new StartSlots(2), dataDir, spec: (id) => sandboxSpec(place, id), log: (l) => logged.push(l) }, size)
const booted = (warm: WarmSandboxes, n: number) =>
  waitFor(
    async () => warm.booted,
    (b) => b === n,
    10_000,
  )

test('ids are handed out once, each with its booted sandbox; the pool refills to its size; close destroys what no session claimed', async () => {
  const warm = pool(2)
  expect(warm.sessionId()).not.toBe(warm.sessionId()) // not started: plain new ids, no sandbox
  warm.start()
  await booted(warm, 2)
  const first = warm.sessionId()
  const second = warm.sessionId()
  expect(first).not.toBe(second)
  const handle = await warm.claim(first)
  expect(handle?.id).toBe(first)
  expect(existsSync(handle!.hostWorkspace)).toBe(true)
  expect(await warm.claim(first)).toBeNull() // claimed once only
  expect(await warm.claim('never-warm')).toBeNull()
  await booted(warm, 2) // refilled behind the two taken
  await warm.close()
  // The pool's own and the taken-but-unclaimed one are gone; the claimed one is its session's.
  expect(existsSync(sandboxDir(dataDir, second))).toBe(false)
  expect(existsSync(handle!.hostWorkspace)).toBe(true)
  await driver.destroy(handle!)
  expect(warm.sessionId()).not.toBe(first)
})

test("a refused create's sandbox is not left behind: the pool, refilled meanwhile, destroys it", async () => {
  const warm = pool(1)
  warm.start()
  await booted(warm, 1)
  const id = warm.sessionId()
  warm.giveBack(id) // refilling (booting) already: one too many, so it is destroyed
  await booted(warm, 1)
  await waitFor(
    async () => existsSync(sandboxDir(dataDir, id)),
    (exists) => !exists,
    10_000,
  )
  const next = warm.sessionId()
  expect(next).not.toBe(id)
  await warm.close()
  expect(existsSync(sandboxDir(dataDir, next))).toBe(false)
  expect(logged).toEqual([])
})

test('the CLI started ahead is the harness the last create asked for; a create takes a sandbox holding its own harness first', async () => {
  const asked: string[] = []
  const dropped: string[] = []
  const warm = new WarmSandboxes(
    {
      driver,
      starts: new StartSlots(2),
      dataDir,
      spec: (id) => sandboxSpec(place, id),
      log: (l) => logged.push(l),
      firstCli: 'harness_1',
      // A real process in the sandbox stands for the CLI; harness_2 has none (as Codex has no StartAhead).
      startCli: (handle, harness) => {
        asked.push(harness)
        if (harness === 'harness_2') return null
        return { harness, model: 'm', key: `k-${handle.id}`, process: driver.exec(handle, ['sleep', '60'], { env: {} }), ended: false }
      },
      dropCli: (started) => {
        dropped.push(started.harness)
        started.process.kill('SIGKILL')
      },
    },
    2,
  )
  const startedClis = (n: number) =>
    waitFor(
      async () => warm.startedClis,
      (c) => c === n,
      10_000,
    )
  warm.start()
  await booted(warm, 2)
  await startedClis(2)
  expect(asked).toEqual(['harness_1', 'harness_1'])
  // A Gemini create takes one of them (no Gemini CLI waits yet); the refill starts Gemini's.
  const first = warm.sessionId('harness_3')
  expect(warm.takeStarted(first)?.harness).toBe('harness_1')
  await startedClis(2)
  expect(asked).toEqual(['harness_1', 'harness_1', 'harness_3'])
  // The next Gemini create takes the sandbox holding Gemini's CLI, not the older Claude Code one.
  const second = warm.sessionId('harness_3')
  expect(warm.takeStarted(second)?.harness).toBe('harness_3')
  await startedClis(2) // the older Claude Code one, and Gemini's again in the refill
  // After a Codex create the refill starts no CLI (Codex has none to start ahead).
  const third = warm.sessionId('harness_2')
  await booted(warm, 2)
  await Bun.sleep(300)
  expect(asked).toEqual(['harness_1', 'harness_1', 'harness_3', 'harness_3', 'harness_2'])
  expect(warm.takeStarted(third)?.harness).toBe('harness_1')
  expect(warm.startedClis).toBe(1)
  for (const id of [first, second, third]) {
    const handle = await warm.claim(id)
    if (handle) await driver.destroy(handle)
  }
  await warm.close()
  expect(dropped).toEqual(['harness_3']) // close ends the one still waiting
  expect(logged).toEqual([])
})
