import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { SandboxHandle, SandboxProcess } from '../../sandbox/driver'
import { GvisorDriver, gvisorWorks } from '../../sandbox/gvisor/driver'
import { Runsc } from '../../sandbox/gvisor/runsc'
import { containerCgroup } from '../../sandbox/gvisor/containers'
import { sandboxNameOf } from '../../sandbox/gvisor/spec'
import { cgroupName } from '../../sandbox/cgroup'
import { defaultRunRoot } from '../../sandbox/relay'
import type { TailedProcess } from '../../sandbox/tail'
import {
  alive,
  fakeGateway,
  hostSandboxSkipReason,
  skipAllowed,
  readNumber,
  removeScope,
  specFor,
  tempRoot,
  testScope,
  text,
  waitFor,
} from './helpers'

/**
 * The gvisor driver on the real runsc: a park is a checkpoint with nothing left running, a wake a
 * restore where every process goes on from where it stopped, output included.
 */
const skip = hostSandboxSkipReason() ?? skipAllowed(gvisorWorks() ? null : 'runsc does not work here (needs root, runsc, socat, cgroup v1)')
if (skip) console.warn(`test/sandbox/gvisor: skipped (${skip})`)

const root = tempRoot()
const gateway = fakeGateway()
const scope = testScope()
const logs: string[] = []
const make = () => new GvisorDriver({ scope, log: (line) => logs.push(line) })
afterAll(async () => {
  if (!skip) await make().sweep([])
  removeScope(scope)
  await root[Symbol.asyncDispose]()
  gateway[Symbol.dispose]()
})

/** Live host processes of runsc for a sandbox (its sentry and gofer carry the bundle path). */
function runscProcesses(stateDir: string): number[] {
  const found: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8')
      if (/^(\S*\/)?runsc/.test(cmdline) && cmdline.includes(stateDir) && alive(Number(entry))) found.push(Number(entry))
    } catch {
      // gone
    }
  }
  return found
}

describe.skipIf(skip !== null)('gvisor driver', () => {
  const driver = make()
  let n = 0
  const spec = (overrides = {}) => specFor(root.path, `gv-${++n}`, gateway.port, overrides)
  const sh = (handle: SandboxHandle, script: string) =>
    driver.exec(handle, ['/bin/sh', '-c', script], { env: { PATH: '/usr/bin:/bin', HOME: handle.home } })
  const lines = (proc: SandboxProcess) => {
    const seen: string[] = []
    const done = (async () => {
      const decoder = new TextDecoder()
      let tail = ''
      for await (const chunk of proc.stdout) {
        const parts = (tail + decoder.decode(chunk, { stream: true })).split('\n')
        tail = parts.pop()!
        seen.push(...parts)
      }
    })()
    return { seen, done }
  }
  /** The lines an exec has written to its output file on the host: what its reader is to see. */
  const written = (proc: SandboxProcess) => (readFileSync(`${(proc as TailedProcess).prefix}.out`, 'utf8').match(/\n/g) ?? []).length

  test('a file written in one exec is there in the next, after park and wake', async () => {
    const s = spec()
    const handle = await driver.create(s)
    expect(await sh(handle, 'echo turn-1 > /workspace/notes.txt; echo home > "$HOME/.state"').exited).toBe(0)
    await driver.park(handle)
    await waitFor('runsc to end', () => runscProcesses(s.stateDir).length === 0, 2000)
    await driver.wake(handle)
    const proc = sh(handle, 'cat /workspace/notes.txt "$HOME/.state"')
    expect(await text(proc.stdout)).toBe('turn-1\nhome\n')
    expect(await proc.exited).toBe(0)
    await driver.destroy(handle)
  }, 60_000)

  // Counters write each number aside and rename it into place: a read never meets a file the
  // shell has just truncated.
  /** A counter in /workspace/count, started by one exec that ends at once: the loop lives on in the sandbox, as an agent's would. */
  const startCounter = async (handle: SandboxHandle) => {
    const loop = 'i=0; while :; do i=$((i+1)); echo $i > /workspace/count.new; mv /workspace/count.new /workspace/count; sleep 0.05; done'
    expect(await sh(handle, `setsid sh -c '${loop}' </dev/null >/dev/null 2>&1 &`).exited).toBe(0)
  }

  test('a background counter goes on counting from where it stopped after a wake', async () => {
    const s = spec()
    const handle = await driver.create(s)
    const counter = join(handle.hostWorkspace, 'count')
    await startCounter(handle)
    await waitFor('the counter to count', () => readNumber(counter) >= 5)
    await driver.park(handle)
    const parked = readNumber(counter)
    await Bun.sleep(500)
    expect(readNumber(counter)).toBe(parked)
    await driver.wake(handle)
    await waitFor('the counter to go on', () => readNumber(counter) > parked + 2)
    const after = readNumber(counter)
    // It went on from its own memory: no restart at 1.
    expect(after).toBeGreaterThan(parked)
    expect(after).toBeLessThan(parked + 100)
    await driver.destroy(handle)
  }, 60_000)

  test('a copy of a parked sandbox has its files and its memory; after it, neither sees the other’s writes', async () => {
    const s = spec()
    const handle = await driver.create(s)
    expect(await sh(handle, 'echo from-source > /workspace/notes.txt; echo home > "$HOME/.state"').exited).toBe(0)
    await startCounter(handle)
    await waitFor('the counter to count', () => readNumber(join(handle.hostWorkspace, 'count')) >= 5)
    await driver.park(handle)
    const parked = readNumber(join(handle.hostWorkspace, 'count'))
    const c = spec()
    const copy = await driver.copy(handle, c)
    expect(copy.hostWorkspace).toBe(c.hostWorkspace)
    // Parked as its source: nothing of it runs until its wake.
    expect(runscProcesses(c.stateDir)).toEqual([])
    await driver.wake(copy)
    // The copy's counter is the source's process, restored: it goes on from where it was, in the copy's files.
    await waitFor('the copied counter to go on', () => readNumber(join(copy.hostWorkspace, 'count')) > parked + 2)
    expect(readNumber(join(copy.hostWorkspace, 'count'))).toBeLessThan(parked + 100)
    // The source has not moved meanwhile, and goes on by itself once woken.
    expect(readNumber(join(handle.hostWorkspace, 'count'))).toBe(parked)
    const copyWrites = sh(
      copy,
      'cat /workspace/notes.txt "$HOME/.state"; echo from-copy > /workspace/notes.txt; echo only-copy > /workspace/copy.txt',
    )
    expect(await text(copyWrites.stdout)).toBe('from-source\nhome\n')
    expect(await copyWrites.exited).toBe(0)
    await driver.wake(handle)
    const sourceReads = sh(handle, 'cat /workspace/notes.txt; ls /workspace; echo changed > /workspace/source.txt')
    const seen = await text(sourceReads.stdout)
    expect(seen.startsWith('from-source\n')).toBe(true)
    expect(seen).not.toContain('copy.txt')
    expect(await sourceReads.exited).toBe(0)
    expect(existsSync(join(copy.hostWorkspace, 'source.txt'))).toBe(false)
    await driver.destroy(copy)
    // Gone with its copy: nothing of the source.
    expect(readFileSync(join(handle.hostWorkspace, 'notes.txt'), 'utf8')).toBe('from-source\n')
    await driver.destroy(handle)
  }, 60_000)

  test('park leaves no runsc process holding RAM; stats say so', async () => {
    const s = spec()
    const handle = await driver.create(s)
    expect(runscProcesses(s.stateDir).length).toBeGreaterThan(0)
    expect((await driver.stats(handle)).memoryBytes).toBeGreaterThan(0)
    await driver.park(handle)
    // The sentry (the memory) is gone when park returns; the gofer ends with it.
    await waitFor('the gofer to end', () => runscProcesses(s.stateDir).length === 0, 2000)
    const stats = await driver.stats(handle)
    expect(stats.memoryBytes).toBe(0)
    expect(stats.processes).toBe(0)
    expect(existsSync(join(s.stateDir, 'image', 'checkpoint.img'))).toBe(true)
    expect(stats.diskBytes).toBeGreaterThan(0)
    await driver.destroy(handle)
  }, 60_000)

  test("an exec's output goes on across park and wake, and its exit code arrives", async () => {
    const handle = await driver.create(spec())
    const proc = sh(handle, 'for i in $(seq 1 20); do echo line $i; sleep 0.05; done; echo bye >&2; exit 7')
    const out = lines(proc)
    await waitFor('a few lines', () => out.seen.length >= 3)
    await driver.park(handle)
    // Counted once the reader has every line written before the park (it tails the file).
    await waitFor('the lines written before the park, read', () => out.seen.length === written(proc))
    const seen = out.seen.length
    await Bun.sleep(300)
    expect(out.seen.length).toBe(seen)
    await driver.wake(handle)
    expect(await proc.exited).toBe(7)
    await out.done
    expect(out.seen).toEqual(Array.from({ length: 20 }, (_, i) => `line ${i + 1}`))
    expect(await text(proc.stderr)).toBe('bye\n')
    await driver.destroy(handle)
  }, 60_000)

  test('kill ends a process group; a kill sent while parked lands at wake; exec while parked waits', async () => {
    const handle = await driver.create(spec())
    const first = sh(handle, 'sleep 600 & wait')
    await waitFor('it to start', () => first.pid > 0)
    await Bun.sleep(300)
    first.kill('SIGTERM')
    expect(await first.exited).toBe(143)
    const second = sh(handle, 'sleep 600') as TailedProcess
    // Running inside (its wrapper wrote its group) before the park: the kill has a process to land on.
    await waitFor('it to run', () => second.groupId())
    await driver.park(handle)
    second.kill('SIGKILL')
    const third = sh(handle, 'echo started after wake')
    await driver.wake(handle)
    expect(await second.exited).toBe(137)
    expect(await text(third.stdout)).toBe('started after wake\n')
    await driver.destroy(handle)
  }, 60_000)

  test('an open TCP connection cannot be checkpointed: park freezes the sandbox instead, and says so', async () => {
    const handle = await driver.create(spec())
    const server = driver.exec(
      handle,
      [
        '/usr/bin/node',
        '-e',
        "const net = require('net'); net.createServer(c => c.on('data', d => c.write(d))).listen(7000, () => { const s = net.connect(7000); s.on('data', d => console.log(String(d))); setInterval(() => s.write('ping'), 100) })",
      ],
      { env: { PATH: '/usr/bin:/bin' } },
    )
    const out = lines(server)
    await waitFor('an echo', () => out.seen.length > 0, 20_000)
    logs.length = 0
    await driver.park(handle)
    expect(logs.join('\n')).toContain('parked without a checkpoint')
    // What the node process printed before the freeze may still be on its way through the output
    // file's tail: count from once that has come.
    await waitFor('the echoes written before the freeze, read', () => out.seen.length === written(server))
    const echoed = out.seen.length
    await Bun.sleep(600)
    expect(out.seen.length).toBe(echoed)
    expect((await driver.stats(handle)).memoryBytes).toBeGreaterThan(0)
    await driver.wake(handle)
    await waitFor('more echoes', () => out.seen.length > echoed + 2)
    server.kill()
    await driver.destroy(handle)
  }, 60_000)

  test('the memory limit stops the sandbox; the turn fails with 137 and a reason; the next exec starts it afresh', async () => {
    const handle = await driver.create(spec({ limits: { memoryBytes: 128 * 1024 * 1024, maxProcesses: 256 } }))
    writeFileSync(join(handle.hostWorkspace, 'kept'), 'files survive')
    const hog = sh(handle, 'head -c 400000000 /dev/zero | tail -n 1 >/dev/null')
    expect(await hog.exited).toBe(137)
    expect(await text(hog.stderr)).toContain('memory limit')
    expect((await driver.stats(handle)).oomKills).toBeGreaterThan(0)
    const next = sh(handle, 'cat /workspace/kept')
    expect(await text(next.stdout)).toBe('files survive')
    await driver.destroy(handle)
  }, 60_000)

  test('the process limit stops a fork bomb inside', async () => {
    const handle = await driver.create(spec({ limits: { memoryBytes: 512 * 1024 * 1024, maxProcesses: 40 } }))
    const proc = sh(handle, 'for i in $(seq 1 100); do sleep 2 & done; echo all started')
    const [code, out, err] = await Promise.all([proc.exited, text(proc.stdout), text(proc.stderr)])
    expect({ code, out }).toEqual({ code: 2, out: '' })
    expect(err).toContain('fork')
    // Once the bomb's sleeps end, a process starts again.
    await waitFor('a process to start again', async () => (await sh(handle, 'true').exited) === 0, 30_000)
    await driver.destroy(handle)
  }, 60_000)

  test('after a restart, a parked sandbox is found again and wakes where it was', async () => {
    logs.length = 0
    const s = spec()
    const handle = await driver.create(s)
    const counter = join(handle.hostWorkspace, 'count')
    await startCounter(handle)
    await waitFor('the counter', () => readNumber(counter) >= 3)
    await driver.park(handle)
    const parked = readNumber(counter)
    const next = make() // a new server
    const recovered = await next.recover(s)
    expect(recovered?.gatewayUrl).toBe(handle.gatewayUrl)
    await next.wake(recovered!)
    // What the driver said (a restore that fell back to a fresh start) is in the message if the counter stops.
    await waitFor('the counter to go on', () => readNumber(counter) > parked + 2 || (logs.length > 0 && logs.join('\n')), 30_000)
    expect(logs).toEqual([])
    expect(readNumber(counter)).toBeLessThan(parked + 100)
    // And a running one is taken over as it is.
    const again = await make().recover(s)
    expect(
      await make().recover({ ...s, id: 'gone', hostWorkspace: join(root.path, 'nothing'), stateDir: join(root.path, 'gone-state') }),
    ).toBeNull()
    const proc = next.exec(again!, ['/bin/cat', '/workspace/count'], { env: {} })
    expect(Number(await text(proc.stdout))).toBeGreaterThan(parked)
    await next.destroy(recovered!)
    expect(runscProcesses(s.stateDir)).toEqual([])
  }, 60_000)

  test("after a crash, a running sandbox is taken over: the old server's execs end, background processes go on", async () => {
    const s = spec()
    const handle = await driver.create(s)
    const counter = join(handle.hostWorkspace, 'count')
    await startCounter(handle)
    const turn = sh(handle, 'exec sleep 600') as TailedProcess // the turn in flight when the server died
    await waitFor('the counter', () => readNumber(counter) >= 3)
    await waitFor('the turn to run', () => turn.groupId())
    const next = make()
    const recovered = await next.recover(s)
    await next.wake(recovered!)
    const ps = next.exec(recovered!, ['/bin/ps', '-eo', 'args'], { env: {} })
    const running = await text(ps.stdout)
    expect(running).not.toContain('sleep 600')
    expect(running).toContain('while :')
    const at = readNumber(counter)
    await waitFor('the counter to go on', () => readNumber(counter) > at + 2)
    await next.destroy(recovered!)
  }, 60_000)

  // Each way of holding a turn still (park.ts): runsc's own pause, the default on systrap, and the
  // host's cgroup freezer, the default on ptrace; both must outlive a server that stops.
  for (const pauseBy of ['runsc pause', 'cgroup freezer'] as const) {
    test(`a turn paused by ${pauseBy} stops, goes on after a restart that keeps it, and is killed by one that does not`, async () => {
      const paused = () => new GvisorDriver({ scope, log: (line) => logs.push(line), pauseBy })
      const first = paused()
      const s = spec()
      const handle = await first.create(s)
      const turn = first.exec(handle, ['/bin/sh', '-c', ': the-turn; i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done'], {
        env: { PATH: '/usr/bin:/bin' },
      }) as TailedProcess
      const out = lines(turn)
      await waitFor('its lines', () => out.seen.length >= 3)
      await first.park(handle, { keepProcesses: true })
      // As runsc and the host see it: paused in runsc's state, or frozen in the container's cgroup.
      const driverScope = cgroupName(scope).slice(0, 32)
      const runsc = new Runsc(join(defaultRunRoot(), driverScope, 'runsc'))
      const cid = (await runsc.list()).find((c) => sandboxNameOf(c) === cgroupName(handle.id))!
      expect(containerCgroup(driverScope, cid).frozen()).toBe(pauseBy === 'cgroup freezer')
      if (pauseBy === 'runsc pause') expect((await runsc.state(cid))?.status).toBe('paused')
      await waitFor('the lines written before the pause, read', () => out.seen.length === written(turn))
      const before = out.seen.length
      await Bun.sleep(400)
      expect(out.seen.length).toBe(before)
      // A new server that keeps the turn finds it paused; its wake resumes it where it stood.
      const second = paused()
      const kept = await second.recover(s, { keep: [turn.ref] })
      const again = second.reattach(kept!, turn.ref) as TailedProcess
      expect(again).not.toBeNull()
      await second.wake(kept!)
      await waitFor('more lines', () => written(again) > before + 5)
      const numbers = readFileSync(`${again.prefix}.out`, 'utf8').trim().split('\n').map(Number)
      expect(numbers).toEqual(numbers.map((_, i) => i + 1)) // none lost, none twice
      // Paused again and found by a server that keeps nothing: killed where it stands, woken afresh.
      await second.park(kept!, { keepProcesses: true })
      const third = paused()
      const fresh = await third.recover(s)
      expect(runscProcesses(s.stateDir)).toEqual([])
      await third.wake(fresh!)
      const ps = third.exec(fresh!, ['/bin/ps', '-eo', 'args'], { env: {} })
      expect(await text(ps.stdout)).not.toContain('the-turn')
      await third.destroy(fresh!)
      expect(runscProcesses(s.stateDir)).toEqual([])
    }, 60_000)
  }

  test('destroy leaves no container, process or cgroup; sweep removes what no live session owns', async () => {
    const kept = await driver.create(spec())
    const s = spec()
    const orphan = await make().create(s) // its driver is "gone"
    const removed = await make().sweep([kept.id])
    expect(removed).toContain(orphan.id)
    expect(removed).not.toContain(kept.id)
    expect(runscProcesses(s.stateDir)).toEqual([])
    expect(await sh(kept, 'true').exited).toBe(0)
    await driver.destroy(kept)
    // Nothing runs in its cgroups any more; runsc removes them (and its state) in the background.
    const cgroups = () => readdirSync(`/sys/fs/cgroup/pids/agentd/${scope}`).filter((name) => name.startsWith(`${kept.id}.`))
    for (const name of cgroups()) expect(readFileSync(`/sys/fs/cgroup/pids/agentd/${scope}/${name}/cgroup.procs`, 'utf8')).toBe('')
    await waitFor('its cgroups to go', () => cgroups().length === 0, 10_000)
  }, 60_000)
})
