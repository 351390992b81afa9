import { afterAll, expect, test } from 'bun:test'
import { cgroupWrapArgs, SandboxCgroup } from '../../sandbox/cgroup'
import { removeScope } from './helpers'

/**
 * The freeze that parks a running gVisor turn, on this host's real cgroups (v1 here). gVisor's
 * sentry traces its stub processes with ptrace; `strace -f` over a loop that forks does the same
 * to the kernel's freezer: tracees its one pass misses, tasks appearing while it runs. One write
 * of FROZEN left 18 of 20 such cgroups FREEZING after 5 s on this machine (the fresh clone of
 * stop 32 lost a graceful restart's handover to it); a freeze must get them all.
 */
const scope = `freeze-test-${process.pid}`
afterAll(() => removeScope(scope))

test('a cgroup of traced, forking processes freezes every time, stays frozen, and thaws', async () => {
  const cgroup = SandboxCgroup.for(`agentd/${scope}`, 'traced')
  cgroup.create({ memoryBytes: 256 * 1024 * 1024, maxProcesses: 64 })
  const tracer = Bun.spawn(
    cgroupWrapArgs(cgroup.joinFiles(), ['strace', '-f', '-o', '/dev/null', 'sh', '-c', 'while true; do /bin/true; done']),
    { stdout: 'ignore', stderr: 'pipe' },
  )
  try {
    // Tracer, shell and a child at least: the loop is under way.
    for (let i = 0; cgroup.pids().length < 3; i++) {
      if (i > 5000) throw new Error(`the traced loop never started: ${await new Response(tracer.stderr).text()}`)
      await Bun.sleep(2)
    }
    for (let round = 0; round < 5; round++) {
      await cgroup.freeze(5000)
      // Frozen: nothing forks, so the processes stay the same ones.
      const held = cgroup.pids().sort()
      await Bun.sleep(100)
      expect(cgroup.pids().sort()).toEqual(held)
      cgroup.thaw()
      expect(cgroup.frozen()).toBe(false)
      await Bun.sleep(50)
    }
  } finally {
    await cgroup.remove()
    tracer.kill('SIGKILL')
  }
})
