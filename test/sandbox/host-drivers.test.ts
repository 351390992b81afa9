import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, lstatSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BwrapDriver } from '../../sandbox/bwrap/driver'
import { CGROUP_ROOT } from '../../sandbox/cgroup'
import type { SandboxHandle } from '../../sandbox/driver'
import type { HostDriver } from '../../sandbox/host-driver'
import { NetPool } from '../../sandbox/bwrap/netns'
import { ProcessDriver } from '../../sandbox/process'
import { settleSpares } from '../../sandbox/spare-refill'
import { alive, fakeGateway, hostSandboxSkipReason, readNumber, removeScope, specFor, tempRoot, testScope, text, waitFor } from './helpers'

/**
 * The process and bwrap drivers on real processes: park freezes every process of the sandbox and
 * wake thaws them, the limits kill what goes over them, destroy leaves nothing behind.
 */
const skip = hostSandboxSkipReason()
if (skip) console.warn(`test/sandbox/host-drivers: skipped (${skip})`)

const root = tempRoot()
const gateway = fakeGateway()
afterAll(async () => {
  await root[Symbol.asyncDispose]()
  gateway[Symbol.dispose]()
})

const makers: [string, (scope: string) => HostDriver][] = [
  ['process', (scope) => new ProcessDriver({ scope })],
  ['bwrap', (scope) => new BwrapDriver({ scope })],
]

for (const [kind, make] of makers) {
  describe.skipIf(skip !== null)(`${kind} driver`, () => {
    const scope = testScope()
    const driver = make(scope)
    afterAll(async () => {
      await make(scope).sweep([])
      removeScope(scope)
    })
    let n = 0
    const spec = (overrides = {}) => specFor(root.path, `${kind}-${++n}`, gateway.port, overrides)
    const sh = (handle: SandboxHandle, script: string) => driver.exec(handle, ['/bin/sh', '-c', script], { env: { PATH: '/usr/bin:/bin' } })

    test('park stops a counter loop, wake resumes it', async () => {
      const handle = await driver.create(spec())
      const counter = join(handle.hostWorkspace, 'count')
      sh(handle, 'i=0; while :; do i=$((i+1)); echo $i > count.new; mv count.new count; sleep 0.02; done')
      await waitFor('the counter to count', () => readNumber(counter) > 5)
      await driver.park(handle)
      const parked = readNumber(counter)
      await Bun.sleep(300)
      expect(readNumber(counter)).toBe(parked)
      await driver.wake(handle)
      await waitFor('the counter to go on', () => readNumber(counter) > parked + 3)
      await driver.destroy(handle)
    })

    test("a running exec's stdout stalls while parked and goes on after wake", async () => {
      const handle = await driver.create(spec())
      const proc = sh(handle, 'for i in 1 2 3 4 5 6 7 8 9 10; do echo line $i; sleep 0.05; done; exit 3')
      const lines: string[] = []
      const reading = (async () => {
        const decoder = new TextDecoder()
        for await (const chunk of proc.stdout) lines.push(...decoder.decode(chunk).split('\n').filter(Boolean))
      })()
      await waitFor('a first line', () => lines.length > 0)
      await driver.park(handle)
      await Bun.sleep(100)
      const seen = lines.length
      await Bun.sleep(300)
      expect(lines.length).toBe(seen)
      await driver.wake(handle)
      expect(await proc.exited).toBe(3)
      await reading
      expect(lines).toEqual(Array.from({ length: 10 }, (_, i) => `line ${i + 1}`))
      await driver.destroy(handle)
    })

    test('a file written in one exec is there in the next, after park and wake', async () => {
      const handle = await driver.create(spec())
      expect(await sh(handle, 'echo turn-1 > notes.txt').exited).toBe(0)
      await driver.park(handle)
      await driver.wake(handle)
      const proc = sh(handle, 'cat notes.txt')
      expect(await text(proc.stdout)).toBe('turn-1\n')
      expect(await proc.exited).toBe(0)
      await driver.destroy(handle)
    })

    test('a copy of a parked sandbox has its files, none of its processes, and shares nothing with it after', async () => {
      const handle = await driver.create(spec())
      // A link at a host file the sandbox planted: copied as a link, never followed into the copy.
      const hostFile = join(root.path, 'host-secret')
      writeFileSync(hostFile, 'host only\n')
      expect(
        await sh(handle, `echo from-source > notes.txt; mkdir -p sub; ln -s notes.txt sub/link; ln -s ${hostFile} planted`).exited,
      ).toBe(0)
      const counter = join(handle.hostWorkspace, 'count')
      sh(handle, 'i=0; while :; do i=$((i+1)); echo $i > count.new; mv count.new count; sleep 0.02; done')
      await waitFor('the counter to count', () => readNumber(counter) > 5)
      await driver.park(handle)
      const c = spec()
      const copy = await driver.copy(handle, c)
      expect((await driver.stats(copy)).processes).toBe(0)
      await driver.wake(copy)
      const parked = readNumber(join(copy.hostWorkspace, 'count'))
      await Bun.sleep(200)
      // The source's loop is a host process: it was not copied, so nothing counts in the copy.
      expect(readNumber(join(copy.hostWorkspace, 'count'))).toBe(parked)
      const reads = sh(copy, 'cat notes.txt; readlink sub/link; echo from-copy > notes.txt; echo only-copy > copy.txt')
      expect(await text(reads.stdout)).toBe('from-source\nnotes.txt\n')
      if (kind === 'process') expect(lstatSync(join(copy.hostWorkspace, 'planted')).isSymbolicLink()).toBe(true)
      expect(await reads.exited).toBe(0)
      expect(readFileSync(join(handle.hostWorkspace, 'notes.txt'), 'utf8')).toBe('from-source\n')
      expect(existsSync(join(handle.hostWorkspace, 'copy.txt'))).toBe(false)
      await driver.wake(handle)
      await waitFor('the source to count on', () => readNumber(counter) > parked + 3)
      expect(await sh(handle, 'echo changed > source.txt').exited).toBe(0)
      expect(existsSync(join(copy.hostWorkspace, 'source.txt'))).toBe(false)
      await driver.destroy(copy)
      expect(readFileSync(join(handle.hostWorkspace, 'notes.txt'), 'utf8')).toBe('from-source\n')
      await driver.destroy(handle)
    })

    test('a process started while parked waits for wake', async () => {
      const handle = await driver.create(spec())
      await driver.park(handle)
      const proc = sh(handle, 'echo started')
      const early = await Promise.race([proc.exited.then(() => 'exited'), Bun.sleep(300).then(() => 'stalled')])
      expect(early).toBe('stalled')
      await driver.wake(handle)
      expect(await text(proc.stdout)).toBe('started\n')
      expect(await proc.exited).toBe(0)
      await driver.destroy(handle)
    })

    test('an exec and what it forks are in every hierarchy of the cgroups (joined thread by thread: one thread, so all of it)', async () => {
      const handle = await driver.create(spec())
      const proc = sh(handle, 'sleep 600 & sleep 600')
      const hierarchies = ['pids', 'memory', 'freezer', ...(existsSync(join(CGROUP_ROOT, 'cpu', 'cgroup.procs')) ? ['cpu'] : [])]
      const members = (controller: string) =>
        readFileSync(join(CGROUP_ROOT, controller, 'agentd', scope, handle.id, 'cgroup.procs'), 'utf8')
          .split('\n')
          .filter(Boolean)
          .map(Number)
      await waitFor('the exec and both sleeps', () => members('freezer').length >= 3)
      for (const controller of hierarchies) {
        expect(members(controller)).toContain(proc.pid)
        expect(members(controller).sort()).toEqual(members('freezer').sort())
      }
      await driver.destroy(handle)
    })

    test('the memory limit kills a memory hog', async () => {
      const handle = await driver.create(spec({ limits: { memoryBytes: 64 * 1024 * 1024, maxProcesses: 256 } }))
      // tail keeps the last line in memory until it ends: 400 MB of zeros without a newline.
      const proc = sh(handle, 'head -c 400000000 /dev/zero | tail -n 1 >/dev/null')
      expect(await proc.exited).not.toBe(0)
      const stats = await driver.stats(handle)
      expect(stats.oomKills).toBeGreaterThan(0)
      // The sandbox is still usable.
      expect(await sh(handle, 'true').exited).toBe(0)
      await driver.destroy(handle)
    })

    test('the process limit stops a fork bomb', async () => {
      const handle = await driver.create(spec({ limits: { memoryBytes: 256 * 1024 * 1024, maxProcesses: 40 } }))
      const proc = sh(handle, 'for i in $(seq 1 100); do sleep 2 & done; echo all started')
      const [code, out, err] = await Promise.all([proc.exited, text(proc.stdout), text(proc.stderr)])
      expect({ code, out }).toEqual({ code: 2, out: '' })
      expect(err).toContain('fork')
      expect((await driver.stats(handle)).processes).toBeLessThanOrEqual(40)
      expect(await sh(handle, 'true').exited).toBe(0)
      await driver.destroy(handle)
    })

    test('destroy leaves no process, not even a setsid daemon, and removes the cgroups', async () => {
      const handle = await driver.create(spec())
      // setsid: the daemon leaves the exec's process group and session; the cgroups still have it.
      sh(handle, 'setsid sleep 600 </dev/null >/dev/null 2>&1 & sleep 600')
      await waitFor('two sleeps', async () => (await driver.stats(handle)).processes >= 3)
      const pids = readFileSync(join(CGROUP_ROOT, 'freezer', 'agentd', scope, handle.id, 'cgroup.procs'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map(Number)
      await driver.park(handle) // even frozen ones
      await driver.destroy(handle)
      expect(pids.filter(alive)).toEqual([])
      for (const controller of ['freezer', 'memory', 'pids'])
        expect(existsSync(join(CGROUP_ROOT, controller, 'agentd', scope, handle.id))).toBe(false)
      expect(existsSync(specFor(root.path, handle.id, 0).stateDir)).toBe(false)
      expect(existsSync(handle.hostWorkspace)).toBe(true) // the caller's
    })

    test('stats report memory, processes and disk', async () => {
      const handle = await driver.create(spec())
      writeFileSync(join(handle.hostWorkspace, 'blob'), Buffer.alloc(100_000, 1))
      sh(handle, 'sleep 600')
      await waitFor('the sleep and its memory', async () => {
        const now = await driver.stats(handle)
        return now.processes > 0 && now.memoryBytes > 0
      })
      const stats = await driver.stats(handle)
      expect(stats.diskBytes).toBeGreaterThanOrEqual(100_000)
      expect(stats.memoryBytes).toBeGreaterThan(0)
      await driver.destroy(handle)
    })

    test('recover gives back a sandbox over the same workspace and kills what the old server left', async () => {
      const s = spec()
      const handle = await driver.create(s)
      writeFileSync(join(handle.hostWorkspace, 'kept'), 'yes')
      const orphan = sh(handle, 'sleep 600')
      await waitFor('the sleep', async () => (await driver.stats(handle)).processes > 0)
      // A new server: a new driver of the same scope finds the sandbox again.
      const again = make(scope)
      const recovered = await again.recover(s)
      expect(recovered).not.toBeNull()
      expect(await orphan.exited).not.toBe(0) // killed
      const proc = again.exec(recovered!, ['/bin/cat', 'kept'], { env: {} })
      expect(await text(proc.stdout)).toBe('yes')
      await again.destroy(recovered!)
      expect(await make(scope).recover(specFor(root.path, 'never-made', gateway.port))).toBeNull()
    })

    test('sweep removes sandboxes that are not live, and only in its scope', async () => {
      const otherScope = testScope()
      const other = make(otherScope)
      const otherHandle = await other.create(spec())
      const live = await driver.create(spec())
      const orphan = await driver.create(spec())
      const orphanProc = sh(orphan, 'sleep 600')
      await waitFor('the sleep', async () => (await driver.stats(orphan)).processes > 0)
      const removed = await make(scope).sweep([live.id])
      expect(removed).toContain(orphan.id)
      expect(removed).not.toContain(live.id)
      expect(await orphanProc.exited).not.toBe(0)
      expect(await other.exec(otherHandle, ['/bin/true'], { env: {} }).exited).toBe(0)
      await other.destroy(otherHandle)
      removeScope(otherScope)
      await driver.destroy(live)
      await driver.destroy(orphan)
    })

    // Only bwrap holds a network namespace per sandbox; the test exists for it alone.
    if (kind === 'bwrap')
      test("destroy ends the sandbox's network holder; the spares stay ready", async () => {
        const ownScope = testScope()
        const own = make(ownScope)
        const holders = () =>
          readdirSync('/proc')
            .filter((pid) => /^\d+$/.test(pid))
            .filter((pid) => {
              try {
                const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
                return cmdline.startsWith('bwrap\0--unshare-net') && cmdline.includes(`/agentd/${ownScope}/`) && alive(Number(pid))
              } catch {
                return false
              }
            }).length
        const handles = [await own.create(spec()), await own.create(spec()), await own.create(spec())]
        await settleSpares() // the pool refilled, whenever it chose to
        await waitFor('three holders and the spares', () => holders() === 3 + NetPool.KEEP)
        for (const handle of handles) await own.destroy(handle)
        await waitFor('only the spares', () => holders() === NetPool.KEEP)
        removeScope(ownScope)
      })

    test('exec on a destroyed sandbox throws', async () => {
      const handle = await driver.create(spec())
      await driver.destroy(handle)
      expect(() => sh(handle, 'true')).toThrow(/not running/)
    })

    test('the workspace is where the handle says, and the gateway answers at gatewayUrl', async () => {
      const handle = await driver.create(spec())
      const script = `pwd; echo "$HOME"; exec ${kind === 'process' ? 'node' : '/usr/bin/node'} -e "fetch('${'${URL}'}/v1/ping').then(r => r.text()).then(console.log)"`
      const proc = driver.exec(handle, ['/bin/sh', '-c', script], {
        env: { PATH: '/usr/bin:/bin', HOME: handle.home, URL: handle.gatewayUrl },
      })
      expect((await text(proc.stdout)).split('\n')).toEqual([handle.workspace, handle.home, 'gateway /v1/ping', ''])
      expect(statSync(handle.hostWorkspace).isDirectory()).toBe(true)
      await driver.destroy(handle)
    })
  })
}
