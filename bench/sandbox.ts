/**
 * Sandbox benchmark (issue 3): for each driver that works here, create-to-first-exec latency (a
 * lone start on a settled host, and starts back to back), park and wake latency (p50/p95), RAM held
 * by a parked sandbox and disk per checkpoint, with ratios against bare `runsc do true` and bare
 * `bwrap … true` measured in the same run. `bench/against.sh REV` runs this file on an older tree
 * too, side by side (so its imports of newer modules are optional).
 * Goals (reported, never asserted): gvisor wake p50 < 300 ms and park p50 < 150 ms, bwrap
 * create-to-exec p50 < 50 ms, a parked gvisor sandbox holds no RAM.
 *
 *   bun bench/sandbox.ts    (env: BENCH_SANDBOX_RUNS=30, BENCH_SANDBOX_DRIVERS=gvisor,bwrap,process)
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, rmdirSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BwrapDriver } from '../sandbox/bwrap/driver'
import { diskUsage } from '../sandbox/disk'
import type { SandboxDriver, SandboxKind, SandboxSpec } from '../sandbox/driver'
import { GvisorDriver, gvisorWorks } from '../sandbox/gvisor/driver'
import { bwrapWorks } from '../sandbox/index'
import { ProcessDriver } from '../sandbox/process'
import { specFor } from '../test/sandbox/helpers'

// Newer than some trees bench/against.sh runs this file on.
const settleBackground: () => Promise<void> = await import('../sandbox/spare-refill').then(
  (m) => m.settleSpares,
  () => async () => {},
)
const removeDataDir: (dir: string) => Promise<void> = await import('../test/helpers/cleanup').then(
  (m) => m.removeDataDir,
  () => async (dir: string) => rmSync(dir, { recursive: true, force: true }),
)

const RUNS = Number(process.env.BENCH_SANDBOX_RUNS ?? 30)
const WANTED = (process.env.BENCH_SANDBOX_DRIVERS ?? 'gvisor,bwrap,process').split(',') as SandboxKind[]
const scope = `bench-${crypto.randomUUID().slice(0, 8)}`
const root = mkdtempSync(join(tmpdir(), 'agentd-bench-sandbox-'))
const gateway = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('ok') })
let seq = 0

function spec(memoryBytes = 1024 * 1024 * 1024): SandboxSpec {
  return specFor(root, `b${++seq}`, gateway.port!, { limits: { memoryBytes, maxProcesses: 512 } })
}

function quantile(samples: number[], q: number): number {
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN
}

const ms = (v: number) => (Number.isFinite(v) ? `${v.toFixed(1)} ms` : 'n/a')
const mb = (v: number) => (Number.isFinite(v) ? `${(v / 1024 / 1024).toFixed(1)} MB` : 'n/a')

async function timed(work: () => Promise<unknown>): Promise<number> {
  const started = performance.now()
  await work()
  return performance.now() - started
}

/** p50/p95 of running `argv` to completion RUNS times (after one warm-up). */
async function baseline(argv: string[]): Promise<{ p50: number; p95: number } | null> {
  const once = async () => {
    const proc = Bun.spawn(argv, { stdout: 'ignore', stderr: 'pipe' })
    const code = await proc.exited
    if (code !== 0) throw new Error(`${argv[0]} exited ${code}: ${(await new Response(proc.stderr).text()).trim().split('\n')[0]}`)
  }
  try {
    await once()
    const samples: number[] = []
    for (let i = 0; i < RUNS; i++) samples.push(await timed(once))
    return { p50: quantile(samples, 0.5), p95: quantile(samples, 0.95) }
  } catch (err) {
    console.log(`baseline ${argv[0]}: ${(err as Error).message}`)
    return null
  }
}

interface Figures {
  createExec: number[]
  burst: number[]
  park: number[]
  wake: number[]
  parkedRam: number
  parkedRamNote: string
  checkpointDisk: number
  heldPark: number
  heldWake: number
}

/** create → first exec done on a fresh sandbox (destroy is not timed); `settled`: the host idle first. */
async function createExecSamples(driver: SandboxDriver, settled: boolean): Promise<number[]> {
  const samples: number[] = []
  for (let i = 0; i <= RUNS; i++) {
    if (settled) {
      // A lone start: what the last one left to do in the background (spares, teardown) is done.
      await settleBackground()
      await Bun.sleep(200)
    }
    let handle = null as Awaited<ReturnType<SandboxDriver['create']>> | null
    const took = await timed(async () => {
      handle = await driver.create(spec())
      const code = await driver.exec(handle, ['/bin/true'], { env: {} }).exited
      if (code !== 0) throw new Error(`the first exec exited ${code}`)
    })
    if (i > 0) samples.push(took) // the first run warms caches
    await driver.destroy(handle!)
  }
  return samples
}

async function measure(driver: SandboxDriver): Promise<Figures> {
  const createExec = await createExecSamples(driver, true)
  const burst = await createExecSamples(driver, false)

  // Park and wake of an idle sandbox (between turns: nothing of the agent's running).
  const idle = await driver.create(spec())
  const park: number[] = []
  const wake: number[] = []
  for (let i = 0; i < RUNS; i++) {
    park.push(await timed(() => driver.park(idle)))
    wake.push(await timed(() => driver.wake(idle)))
  }
  await driver.destroy(idle)

  // RAM and disk of a parked sandbox whose agent left a process holding 64 MB.
  const s = spec()
  const handle = await driver.create(s)
  const holder = driver.exec(handle, ['/bin/sh', '-c', '(head -c 67108864 /dev/urandom | tr -d "\\n"; exec sleep 100000) | tail -n 1'], {
    env: { PATH: '/usr/bin:/bin' },
  })
  for (let tries = 0; tries < 200 && (await driver.stats(handle)).memoryBytes < 64 * 1024 * 1024; tries++) await Bun.sleep(50)
  const heldPark = await timed(() => driver.park(handle))
  const parkedRam = (await driver.stats(handle)).memoryBytes
  const checkpointDisk = diskUsage([join(s.stateDir, 'image')])
  // A parked sandbox's runsc client processes exit just after the checkpoint; count what stays.
  for (let tries = 0; driver.kind === 'gvisor' && tries < 30 && runscProcessesOf(s.stateDir) > 0; tries++) await Bun.sleep(100)
  const parkedRamNote =
    driver.kind === 'gvisor' ? `${runscProcessesOf(s.stateDir)} runsc processes left` : 'frozen processes keep their memory'
  const heldWake = await timed(() => driver.wake(handle))
  holder.kill()
  await driver.destroy(handle)
  return { createExec, burst, park, wake, parkedRam, parkedRamNote, checkpointDisk, heldPark, heldWake }
}

function runscProcessesOf(stateDir: string): number {
  let found = 0
  for (const entry of readdirSync('/proc')) {
    try {
      if (
        /^\d+$/.test(entry) &&
        readFileSync(`/proc/${entry}/cmdline`, 'utf8').startsWith('runsc') &&
        readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(stateDir)
      )
        found++
    } catch {
      // gone
    }
  }
  return found
}

function table(rows: [string, string, string][]): void {
  const w0 = Math.max(...rows.map((r) => r[0].length))
  const w1 = Math.max(...rows.map((r) => r[1].length))
  for (const [a, b, c] of rows) console.log(`  ${a.padEnd(w0)}  ${b.padEnd(w1)}  ${c}`)
}

const goal = (met: boolean, text: string) => `goal ${text}: ${met ? 'met' : 'MISSED'}`

console.log(
  `sandbox bench: ${RUNS} runs per figure, scope ${scope}, load average ${readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')} on ${navigator.hardwareConcurrency} CPUs`,
)
const bareTrue = await baseline(['/bin/true'])
const bareRunsc = Bun.which('runsc')
  ? await baseline(['runsc', `--root=${join(root, 'runsc-do')}`, '--network=none', 'do', '/bin/true'])
  : null
const bareBwrap = Bun.which('bwrap')
  ? await baseline([
      'bwrap',
      '--unshare-all',
      '--die-with-parent',
      '--ro-bind',
      '/usr',
      '/usr',
      '--symlink',
      'usr/bin',
      '/bin',
      '--symlink',
      'usr/lib',
      '/lib',
      '--symlink',
      'usr/lib64',
      '/lib64',
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--',
      '/bin/true',
    ])
  : null
console.log('\nbaselines (spawn to exit)')
table([
  ['bare /bin/true', `p50 ${ms(bareTrue?.p50 ?? NaN)}`, `p95 ${ms(bareTrue?.p95 ?? NaN)}`],
  ['bare runsc do true', `p50 ${ms(bareRunsc?.p50 ?? NaN)}`, `p95 ${ms(bareRunsc?.p95 ?? NaN)}`],
  ['bare bwrap … true', `p50 ${ms(bareBwrap?.p50 ?? NaN)}`, `p95 ${ms(bareBwrap?.p95 ?? NaN)}`],
])

const makers: Record<SandboxKind, () => SandboxDriver | null> = {
  gvisor: () => (gvisorWorks() ? new GvisorDriver({ scope, log: () => {} }) : null),
  bwrap: () => (bwrapWorks() ? new BwrapDriver({ scope }) : null),
  process: () => new ProcessDriver({ scope }),
}

for (const kind of WANTED) {
  const driver = makers[kind]?.()
  if (!driver) {
    console.log(`\n${kind}: not available here, skipped`)
    continue
  }
  const f = await measure(driver)
  const ce50 = quantile(f.createExec, 0.5)
  const reference =
    kind === 'gvisor'
      ? { name: 'runsc do true', p50: bareRunsc?.p50 }
      : kind === 'bwrap'
        ? { name: 'bwrap … true', p50: bareBwrap?.p50 }
        : { name: '/bin/true', p50: bareTrue?.p50 }
  console.log(`\n${kind}`)
  table([
    ['create → first exec', `p50 ${ms(ce50)}`, `p95 ${ms(quantile(f.createExec, 0.95))}`],
    [
      `  ratio to bare ${reference.name}`,
      reference.p50 ? `${(ce50 / reference.p50).toFixed(2)}x` : 'n/a',
      reference.p50 ? `(bare p50 ${ms(reference.p50)})` : '',
    ],
    ['  back to back (no pause between)', `p50 ${ms(quantile(f.burst, 0.5))}`, `p95 ${ms(quantile(f.burst, 0.95))}`],
    ['park (idle sandbox)', `p50 ${ms(quantile(f.park, 0.5))}`, `p95 ${ms(quantile(f.park, 0.95))}`],
    ['wake (idle sandbox)', `p50 ${ms(quantile(f.wake, 0.5))}`, `p95 ${ms(quantile(f.wake, 0.95))}`],
    ['park / wake, 64 MB process inside', `${ms(f.heldPark)} / ${ms(f.heldWake)}`, '(one run)'],
    ['RAM held while parked', mb(f.parkedRam), `(64 MB process inside; ${f.parkedRamNote})`],
    [
      'disk per checkpoint',
      kind === 'gvisor' ? mb(f.checkpointDisk) : 'none',
      kind === 'gvisor' ? '(the image; workspace not counted)' : '(no checkpoint: frozen in place)',
    ],
  ])
  if (kind === 'gvisor') {
    // The open-connection check before each checkpoint is one `runsc exec`; what park costs without it.
    const unchecked = new GvisorDriver({ scope, log: () => {}, checkOpenConnections: false })
    const idle = await unchecked.create(spec())
    const parks: number[] = []
    for (let i = 0; i < RUNS; i++) {
      parks.push(await timed(() => unchecked.park(idle)))
      await unchecked.wake(idle)
    }
    await unchecked.destroy(idle)
    table([['  park without the connection check', `p50 ${ms(quantile(parks, 0.5))}`, `p95 ${ms(quantile(parks, 0.95))}`]])
    console.log(`  ${goal(quantile(f.wake, 0.5) < 300, 'wake p50 < 300 ms')}`)
    console.log(`  ${goal(quantile(f.park, 0.5) < 150, 'park p50 < 150 ms')}`)
    console.log(`  ${goal(f.parkedRam === 0 && f.parkedRamNote.startsWith('0 '), 'a parked sandbox holds no RAM')}`)
  }
  if (kind === 'bwrap') console.log(`  ${goal(ce50 < 50, 'create → first exec p50 < 50 ms')}`)
  await (driver as { sweep(ids: string[]): Promise<string[]> }).sweep([])
}

gateway.stop(true)
await removeDataDir(root) // with the spare disks mounted below it
for (const controller of ['freezer', 'memory', 'pids']) {
  try {
    rmdirSync(join('/sys/fs/cgroup', controller, 'agentd', scope))
  } catch {
    // not made, or not empty
  }
}
rmSync(join('/run/agentd', scope), { recursive: true, force: true })
