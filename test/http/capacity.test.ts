/**
 * Host capacity (issue 15): past AGENTD_MAX_SANDBOXES / AGENTD_MAX_STARTING sessions wait `queued`
 * with their place, fair across orgs, and start as room frees; none fails for lack of room; a
 * sandbox start that fails once is tried again.
 */
import { afterAll, describe, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import type { ParkOptions, SandboxHandle, SandboxSpec } from '../../sandbox/driver'
import { ProcessDriver } from '../../sandbox/process'
import { ConfigError, hostCapacity, loadConfig, warmSandboxCount } from '../../src/config'
import { cgroupLimits, hostResources, type CgroupPaths } from '../../src/host-resources'
import { AdmissionQueue } from '../../src/sessions/admission'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script } from '../helpers/http'
import { poll } from '../helpers/poll'
import { settled } from '../helpers/sessions'
import { openSse } from '../helpers/sse'

const ONE_AT_A_TIME = { AGENTD_MAX_SANDBOXES: '1', AGENTD_MAX_STARTING: '1' }

async function create(t: TestApp, token: string, org: string, prompt: string) {
  const res = await t.app.handle(req('POST', `/o/${org}/p/_/sessions`, { token, body: { agent: 'harness_2', prompt } }))
  expect(res.status).toBe(202)
  return json(res)
}

const read = (t: TestApp, token: string, org: string, id: string) => async () =>
  json(await t.app.handle(req('GET', `/o/${org}/p/_/sessions/${id}`, { token })))

describe('one sandbox at a time', () => {
  test('later sessions wait queued with their place, start one by one, and all complete', async () => {
    await using t = await makeTestApp(ONE_AT_A_TIME)
    const token = t.admin.token
    const first = await create(t, token, 'acme', script([{ sleep: 800 }, { answer: 'one' }]))
    const second = await create(t, token, 'acme', script([{ answer: 'two' }]))
    const third = await create(t, token, 'acme', script([{ answer: 'three' }]))
    expect(first).toMatchObject({ status: 'allocating', queue_position: null })
    expect(second).toMatchObject({ status: 'queued', queue_position: 1 })
    expect(third).toMatchObject({ status: 'queued', queue_position: 2 })
    // The stream of the last one says when it is admitted: queued, then allocating.
    const base = t.listen()
    const stream = openSse(`${base}/o/acme/p/_/sessions/${third.execution_id}/events`, token)

    // Never more than one sandbox in use while they run through.
    const ids = [first, second, third].map((s) => s.execution_id as string)
    let mostActive = 0
    let watching = true
    const watcher = (async () => {
      while (watching) {
        const views = await Promise.all(ids.map((id) => read(t, token, 'acme', id)()))
        mostActive = Math.max(mostActive, views.filter((v) => v.status === 'allocating' || v.status === 'running').length)
        const queued = views.filter((v) => v.status === 'queued').map((v) => v.queue_position)
        // Places stay 1..n as the queue moves.
        expect(queued.sort((a, b) => a - b)).toEqual(queued.map((_, i) => i + 1))
        await Bun.sleep(10)
      }
    })()
    const ended = await Promise.all(ids.map((id) => settled(read(t, token, 'acme', id))))
    watching = false
    await watcher
    expect(ended.map((v) => [v.status, v.summary])).toEqual([
      ['completed', 'one'],
      ['completed', 'two'],
      ['completed', 'three'],
    ])
    expect(mostActive).toBe(1)
    const statuses = (await (await stream).frames()).filter((f) => f.event === 'status').map((f) => f.data.status)
    expect(statuses.slice(0, 3)).toEqual(['queued', 'allocating', 'running'])
    expect(statuses.at(-1)).toBe('completed')
  })

  test('fair across orgs: a second org’s one run goes before the first org’s backlog', async () => {
    await using t = await makeTestApp(ONE_AT_A_TIME)
    t.identity.createOrg('globex')
    const other = t.identity.createUser('globex', 'admin@globex.test', 'admin').token
    const busy = await create(t, t.admin.token, 'acme', script([{ sleep: 600 }, { answer: 'busy' }]))
    const acme2 = await create(t, t.admin.token, 'acme', script([{ answer: 'a2' }]))
    const acme3 = await create(t, t.admin.token, 'acme', script([{ answer: 'a3' }]))
    const globex = await create(t, other, 'globex', script([{ answer: 'g1' }]))
    expect([acme2.queue_position, acme3.queue_position]).toEqual([1, 2])
    // acme already has a run going; globex has none: its run is next, acme's move back a place.
    expect(globex.queue_position).toBe(1)
    expect((await read(t, t.admin.token, 'acme', acme2.execution_id)()).queue_position).toBe(2)
    expect((await read(t, t.admin.token, 'acme', acme3.execution_id)()).queue_position).toBe(3)
    // A cancelled queued session leaves the queue; the places behind it move up.
    expect(
      (
        await t.app.handle(
          req('PATCH', `/o/acme/p/_/sessions/${acme2.execution_id}`, { token: t.admin.token, body: { status: 'cancelled' } }),
        )
      ).status,
    ).toBe(200)
    expect((await read(t, other, 'globex', globex.execution_id)()).queue_position).toBe(1)
    expect((await read(t, t.admin.token, 'acme', acme3.execution_id)()).queue_position).toBe(2)
    for (const [org, token, id] of [
      ['acme', t.admin.token, busy.execution_id],
      ['globex', other, globex.execution_id],
      ['acme', t.admin.token, acme3.execution_id],
    ] as const) {
      const view = await settled(read(t, token, org, id))
      expect(view.status).toBe('completed')
    }
    // globex's run was admitted before acme's third: it ended first.
    const ends = await Promise.all([read(t, other, 'globex', globex.execution_id)(), read(t, t.admin.token, 'acme', acme3.execution_id)()])
    expect(Date.parse(ends[0].updated_at)).toBeLessThanOrEqual(Date.parse(ends[1].updated_at))
  })

  test('a paused turn keeps its sandbox counted: the next run waits until that session lets go of it', async () => {
    await using t = await makeTestApp(ONE_AT_A_TIME)
    const token = t.admin.token
    const paused = await create(t, token, 'acme', script([{ sleep: 5000 }, { answer: 'late' }]))
    await poll('the first run to be running', async () => (await read(t, token, 'acme', paused.execution_id)()).status === 'running', {
      timeoutMs: 20_000,
    })
    expect(
      (await t.app.handle(req('PATCH', `/o/acme/p/_/sessions/${paused.execution_id}`, { token, body: { status: 'paused' } }))).status,
    ).toBe(202)
    expect((await read(t, token, 'acme', paused.execution_id)()).status).toBe('paused')
    const next = await create(t, token, 'acme', script([{ answer: 'next' }]))
    expect(next).toMatchObject({ status: 'queued', queue_position: 1 })
    await Bun.sleep(300)
    expect((await read(t, token, 'acme', next.execution_id)()).status).toBe('queued')
    expect(
      (await t.app.handle(req('PATCH', `/o/acme/p/_/sessions/${paused.execution_id}`, { token, body: { status: 'cancelled' } }))).status,
    ).toBe(200)
    expect(await settled(read(t, token, 'acme', next.execution_id))).toMatchObject({ status: 'completed', summary: 'next' })
  })

  test('admission order: round robin across orgs, the one served least recently first, each org oldest first', () => {
    const rows = ['a1', 'a2', 'a3', 'b1', 'a4', 'c1', 'b2'].map((id) => ({ id, orgId: id[0]! }))
    const queue = new AdmissionQueue()
    expect(queue.order(rows).map((r) => r.id)).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'a4'])
    // a was served just now, then c: b goes first, then c, then a.
    queue.admitted('c')
    queue.admitted('a')
    expect(queue.order(rows).map((r) => r.id)).toEqual(['b1', 'c1', 'a1', 'b2', 'a2', 'a3', 'a4'])
    expect(queue.positions(rows).get('a1')).toBe(3)
  })
})

/** The process driver whose first `failures` sandbox starts fail, as a boot that missed its deadline. */
class FlakyStartDriver extends ProcessDriver {
  starts = 0
  constructor(private readonly failures: number) {
    super({ scope: `flaky-${crypto.randomUUID().slice(0, 8)}` })
  }
  override async create(spec: SandboxSpec): Promise<SandboxHandle> {
    if (++this.starts <= this.failures) throw new Error(`the relay did not come up within 15 s (start ${this.starts})`)
    return super.create(spec)
  }
}

describe('a sandbox start that fails', () => {
  test('is tried once more, and the run completes', async () => {
    const driver = new FlakyStartDriver(1)
    await using t = await makeTestApp({}, { driver })
    const created = await create(t, t.admin.token, 'acme', script([{ answer: 'second time' }]))
    const view = await settled(read(t, t.admin.token, 'acme', created.execution_id))
    expect(view).toMatchObject({ status: 'completed', summary: 'second time' })
    expect(driver.starts).toBe(2)
  })

  test('twice fails the run with the cause of each attempt', async () => {
    const driver = new FlakyStartDriver(2)
    await using t = await makeTestApp({}, { driver })
    const created = await create(t, t.admin.token, 'acme', 'hello')
    const view = await settled(read(t, t.admin.token, 'acme', created.execution_id))
    expect(view.status).toBe('failed')
    expect(view.error).toBe(
      'sandbox could not start: the relay did not come up within 15 s (start 2) (first attempt: the relay did not come up within 15 s (start 1))',
    )
    expect(driver.starts).toBe(2)
  })
})

/** The process driver with starts (creates, and wakes of parked sandboxes) that take 300 ms, counting how many run at once. */
class CountingStartDriver extends ProcessDriver {
  private inFlight = 0
  mostAtOnce = 0
  wakes = 0
  readonly parked = new Set<string>()
  constructor() {
    super({ scope: `starts-${crypto.randomUUID().slice(0, 8)}` })
  }
  private async counted<T>(start: () => Promise<T>): Promise<T> {
    this.mostAtOnce = Math.max(this.mostAtOnce, ++this.inFlight)
    try {
      await Bun.sleep(300)
      return await start()
    } finally {
      this.inFlight--
    }
  }
  override create(spec: SandboxSpec): Promise<SandboxHandle> {
    return this.counted(() => super.create(spec))
  }
  override async park(handle: SandboxHandle, options?: ParkOptions): Promise<void> {
    await super.park(handle, options)
    this.parked.add(handle.id)
  }
  override wake(handle: SandboxHandle): Promise<void> {
    // The runtime asks for a wake before every turn: on a running sandbox nothing starts.
    if (!this.parked.delete(handle.id)) return super.wake(handle)
    this.wakes++
    return this.counted(() => super.wake(handle))
  }
}

describe('a wake of a parked sandbox', () => {
  test('takes one of the AGENTD_MAX_STARTING starts: follow-ups to two parked sessions wake them one at a time, and both turns complete', async () => {
    const driver = new CountingStartDriver()
    await using t = await makeTestApp({ AGENTD_MAX_SANDBOXES: '4', AGENTD_MAX_STARTING: '1' }, { driver })
    const token = t.admin.token
    const ids: string[] = []
    for (const n of [1, 2]) {
      const res = await t.app.handle(
        req('POST', '/o/acme/p/_/sessions', {
          token,
          body: { agent: 'harness_2', prompt: script([{ answer: `first ${n}` }]), persistence: 'resumable' },
        }),
      )
      expect(res.status).toBe(202)
      ids.push((await json(res)).execution_id)
    }
    for (const id of ids) expect(await settled(read(t, token, 'acme', id), { turns: 1 })).toMatchObject({ status: 'completed' })
    // Between turns a resumable session's sandbox is parked.
    await poll('both sandboxes to be parked', async () => ids.every((id) => driver.parked.has(id)), { timeoutMs: 20_000 })
    driver.mostAtOnce = 0
    const sent = await Promise.all(
      ids.map((id, i) =>
        t.app.handle(
          req('POST', `/o/acme/p/_/sessions/${id}/messages`, { token, body: { content: script([{ answer: `second ${i + 1}` }]) } }),
        ),
      ),
    )
    expect(sent.map((res) => res.status)).toEqual([200, 200]) // delivered: each starts a turn
    const views = await Promise.all(ids.map((id) => settled(read(t, token, 'acme', id), { turns: 2 })))
    expect(views.map((v) => [v.status, v.summary])).toEqual([
      ['completed', 'second 1'],
      ['completed', 'second 2'],
    ])
    expect(driver.wakes).toBe(2)
    expect(driver.mostAtOnce).toBe(1)
  })
})

describe('AGENTD_MAX_SANDBOXES and AGENTD_MAX_STARTING', () => {
  const GiB = 1024 ** 3
  test('default to what the memory limits fit, at most four per core, and one start per core', () => {
    expect(hostCapacity({}, 2 * GiB, { cores: 2, memoryBytes: 24 * GiB })).toMatchObject({ maxSandboxes: 8, maxStarting: 2 })
    expect(hostCapacity({}, 2 * GiB, { cores: 16, memoryBytes: 24 * GiB })).toMatchObject({ maxSandboxes: 12, maxStarting: 12 })
    expect(hostCapacity({}, 4 * GiB, { cores: 2, memoryBytes: 2 * GiB })).toMatchObject({ maxSandboxes: 1, maxStarting: 1 })
    expect(hostCapacity({}, 2 * GiB, { cores: 2, memoryBytes: 24 * GiB }).basis).toBe(
      'from 2 cores and 24.0 GiB of memory at 2.0 GiB per sandbox',
    )
  })

  test('are taken as set, and a bad value stops the start', () => {
    expect(
      hostCapacity({ AGENTD_MAX_SANDBOXES: '30', AGENTD_MAX_STARTING: '5' }, 2 * GiB, { cores: 2, memoryBytes: 8 * GiB }),
    ).toMatchObject({ maxSandboxes: 30, maxStarting: 5 })
    expect(() => hostCapacity({ AGENTD_MAX_SANDBOXES: '0' }, GiB)).toThrow(ConfigError)
    expect(() => hostCapacity({ AGENTD_MAX_STARTING: '1.5' }, GiB)).toThrow(
      'AGENTD_MAX_STARTING must be a whole number of at least 1, got "1.5"',
    )
  })

  test('warm sandboxes: as set (0 turns them off), else one per eight the host runs on gVisor and none elsewhere', () => {
    const capacity = hostCapacity({}, 2 * GiB, { cores: 2, memoryBytes: 24 * GiB })
    const warm = (env: Record<string, string>, driver: string) =>
      warmSandboxCount({ warmSandboxes: loadConfig({ DATA_DIR: '/nonexistent', ...env }).warmSandboxes, capacity }, driver)
    expect(warm({}, 'gvisor')).toBe(1)
    expect(warm({}, 'bwrap')).toBe(0)
    expect(warm({ AGENTD_WARM_SANDBOXES: '0' }, 'gvisor')).toBe(0)
    expect(warm({ AGENTD_WARM_SANDBOXES: '3' }, 'process')).toBe(3)
    const big = hostCapacity({ AGENTD_MAX_SANDBOXES: '40', AGENTD_MAX_STARTING: '4' }, GiB)
    expect(warmSandboxCount({ warmSandboxes: null, capacity: big }, 'gvisor')).toBe(4)
    expect(() => loadConfig({ DATA_DIR: '/nonexistent', AGENTD_WARM_SANDBOXES: '-1' })).toThrow(
      'AGENTD_WARM_SANDBOXES must be a whole number of at least 0, got "-1"',
    )
  })

  test('CLIs started ahead: Claude Code and Gemini CLI unless AGENTD_WARM_CLI names fewer or none; Codex refused with why', () => {
    const cli = (value?: string) =>
      loadConfig({ DATA_DIR: '/nonexistent', ...(value === undefined ? {} : { AGENTD_WARM_CLI: value }) }).warmCli
    expect(cli()).toEqual(['harness_1', 'harness_3'])
    expect(cli('')).toEqual(['harness_1', 'harness_3'])
    expect(cli('harness_3')).toEqual(['harness_3'])
    expect(cli(' harness_3 , harness_1,harness_3')).toEqual(['harness_3', 'harness_1'])
    expect(cli('none')).toEqual([])
    expect(() => cli('harness_2')).toThrow('Codex reads its prompt before it starts')
    expect(() => cli('harness_1,claude')).toThrow(
      'AGENTD_WARM_CLI names "claude": only harness_1 and harness_3 can be started ahead (or none)',
    )
  })
})

/**
 * Capacity inside a container: the memory limit and CPU quota of the cgroups agentd runs in lower
 * the machine's figures. A copy of the kernel's files (a cgroup root and a /proc/self/cgroup) stands
 * in for a container runtime, which this machine cannot run.
 */
describe('host resources under cgroup limits', () => {
  const GiB = 1024 ** 3
  const made: string[] = []
  afterAll(() => {
    for (const dir of made) rmSync(dir, { recursive: true, force: true })
  })
  function tree(files: Record<string, string>, self: string): CgroupPaths {
    const root = mkdtempSync(join(tmpdir(), 'agentd-cgroup-'))
    made.push(root)
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(root, 'fs', path)), { recursive: true })
      writeFileSync(join(root, 'fs', path), `${text}\n`)
    }
    writeFileSync(join(root, 'self'), self)
    return { root: join(root, 'fs'), self: join(root, 'self') }
  }

  test('v2: memory.max and cpu.max of agentd’s cgroup and its parents, the lowest of each', () => {
    const paths = tree(
      {
        'docker/memory.max': String(3 * GiB),
        'docker/cpu.max': 'max 100000',
        'docker/abc/memory.max': String(4 * GiB),
        'docker/abc/cpu.max': '150000 100000',
      },
      '0::/docker/abc\n',
    )
    expect(cgroupLimits(paths)).toEqual({ memoryBytes: 3 * GiB, cpus: 1.5 })
    const host = hostResources(paths, { cores: 8, memoryBytes: 24 * GiB })
    expect(host).toEqual({ cores: 1, memoryBytes: 3 * GiB, limitedBy: ['the cgroup memory limit', 'the cgroup CPU quota'] })
    expect(hostCapacity({}, 1 * GiB, host)).toMatchObject({ maxSandboxes: 3, maxStarting: 1 })
    expect(hostCapacity({}, 1 * GiB, host).basis).toBe(
      'from 1 cores and 3.0 GiB of memory at 1.0 GiB per sandbox (lowered by the cgroup memory limit and the cgroup CPU quota)',
    )
  })

  test('v1: memory.limit_in_bytes and the CFS quota; "no limit" values and a cgroup namespace’s "/" path', () => {
    const limited = tree(
      {
        'memory/docker/abc/memory.limit_in_bytes': String(2 * GiB),
        'cpu,cpuacct/docker/abc/cpu.cfs_quota_us': '200000',
        'cpu,cpuacct/docker/abc/cpu.cfs_period_us': '100000',
      },
      '4:memory:/docker/abc\n2:cpu,cpuacct:/docker/abc\n1:pids:/docker/abc\n',
    )
    expect(cgroupLimits(limited)).toEqual({ memoryBytes: 2 * GiB, cpus: 2 })
    const unlimited = tree(
      {
        'memory/memory.limit_in_bytes': '9223372036854771712',
        'cpu/cpu.cfs_quota_us': '-1',
        'cpu/cpu.cfs_period_us': '100000',
        'memory.max': 'max',
        'cpu.max': 'max 100000',
      },
      '4:memory:/\n1:cpu:/\n0::/\n',
    )
    expect(cgroupLimits(unlimited)).toEqual({ memoryBytes: null, cpus: null })
    expect(hostResources(unlimited, { cores: 2, memoryBytes: 24 * GiB })).toEqual({ cores: 2, memoryBytes: 24 * GiB, limitedBy: [] })
    // A limit above what the machine has lowers nothing.
    const loose = tree({ 'memory.max': String(64 * GiB) }, '0::/\n')
    expect(hostResources(loose, { cores: 2, memoryBytes: 24 * GiB }).limitedBy).toEqual([])
    // No /proc/self/cgroup to read (not Linux): the machine's figures.
    expect(cgroupLimits({ root: '/nonexistent', self: '/nonexistent/self' })).toEqual({ memoryBytes: null, cpus: null })
  })
})
