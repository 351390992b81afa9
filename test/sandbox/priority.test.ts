import { afterAll, describe, expect, test } from 'bun:test'
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { join } from 'node:path'
import { BwrapDriver } from '../../sandbox/bwrap/driver'
import { CGROUP_ROOT } from '../../sandbox/cgroup'
import type { SandboxDriver } from '../../sandbox/driver'
import { GvisorDriver } from '../../sandbox/gvisor/driver'
import { SANDBOX_NICE } from '../../sandbox/priority'
import { fakeGateway, readNumber, removeScope, specFor, tempRoot, testScope, waitFor } from './helpers'

/**
 * On the real drivers: every host process of a sandbox runs at a positive niceness (so a busy
 * agent only gets the CPU agentd leaves), and its cgroups hold the CPU quota, memory and task
 * limits the spec asks for (cgroup v1 here; v2 in cgroup-v2.test.ts).
 */

const root = tempRoot()
const gateway = fakeGateway()
const scope = testScope()
const drivers: SandboxDriver[] = []
afterAll(async () => {
  for (const driver of drivers) await driver.sweep([])
  removeScope(scope)
  await root[Symbol.asyncDispose]()
  gateway[Symbol.dispose]()
})

/** The niceness of a host process (field 19 of /proc/<pid>/stat), or null once it is gone. */
function niceOf(pid: number): number | null {
  try {
    return Number(readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16])
  } catch {
    return null
  }
}

const limits = { memoryBytes: 256 * 1024 * 1024, maxProcesses: 64, cpus: 0.5, diskBytes: 32 * 1024 * 1024 }

for (const kind of ['bwrap', 'gvisor'] as const) {
  describe(`${kind} sandboxes`, () => {
    test('run niced below agentd, in cgroups with the CPU quota, memory and task limits of the spec', async () => {
      const ownNet = readlinkSync(`/proc/${process.pid}/task/${process.pid}/ns/net`)
      const driver = kind === 'bwrap' ? new BwrapDriver({ scope }) : new GvisorDriver({ scope, log: () => {} })
      drivers.push(driver)
      const handle = await driver.create(specFor(root.path, `prio-${kind}`, gateway.port, { limits }))
      const proc = driver.exec(handle, ['/bin/sh', '-c', 'echo started; sleep 600'], { env: { PATH: '/usr/bin:/bin' } })
      const reader = proc.stdout.getReader()
      expect(new TextDecoder().decode((await reader.read()).value)).toContain('started')
      // The sandbox's cgroup: the sandbox id on bwrap, its current container on gVisor.
      const parent = join(CGROUP_ROOT, 'pids', 'agentd', scope)
      const name = await waitFor(
        'the sandbox cgroup',
        () => readdirSync(parent, { withFileTypes: true }).find((e) => e.isDirectory() && e.name.startsWith(`prio-${kind}`))?.name,
        30_000,
      )
      const pids = readFileSync(join(parent, name, 'cgroup.procs'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map(Number)
      expect(pids.length).toBeGreaterThan(0)
      const nices = pids.map(niceOf).filter((n) => n !== null)
      expect(nices.length).toBeGreaterThan(0)
      // gVisor's systrap platform runs its stub threads one step below the sentry, by design.
      expect(nices).toContain(SANDBOX_NICE)
      for (const nice of nices) expect([SANDBOX_NICE, ...(kind === 'gvisor' ? [SANDBOX_NICE + 1] : [])]).toContain(nice)
      // Started niced, and in the sandbox's network namespace, from agentd's own thread (bwrap),
      // which is back at its own niceness and in its own namespace.
      expect(niceOf(process.pid)).toBe(0)
      expect(readlinkSync(`/proc/${process.pid}/task/${process.pid}/ns/net`)).toBe(ownNet)
      if (kind === 'bwrap') for (const pid of pids) expect(readlinkSync(`/proc/${pid}/ns/net`)).not.toBe(ownNet)
      expect(readNumber(join(CGROUP_ROOT, 'cpu', 'agentd', scope, name, 'cpu.cfs_quota_us'))).toBe(50_000)
      expect(readNumber(join(CGROUP_ROOT, 'cpu', 'agentd', scope, name, 'cpu.cfs_period_us'))).toBe(100_000)
      expect(readNumber(join(CGROUP_ROOT, 'memory', 'agentd', scope, name, 'memory.limit_in_bytes'))).toBe(limits.memoryBytes)
      if (kind === 'bwrap') expect(readNumber(join(parent, name, 'pids.max'))).toBe(64)
      proc.kill('SIGKILL')
      reader.releaseLock()
      await proc.exited
      await driver.destroy(handle)
    }, 60_000)
  })
}
