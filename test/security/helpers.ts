import { lstatSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'
import { settled } from '../helpers/sessions'
import { settleSpares } from '../../sandbox/spare-refill'

/** The isolating drivers every attack is tried on; CI has both (never skipped). */
export const ISOLATING = ['gvisor', 'bwrap'] as const
export type IsolatingKind = (typeof ISOLATING)[number]

export { script }

/** A whole agentd in-process on the real sandbox driver `kind` (dispose with `await using`). */
export function securityApp(kind: IsolatingKind, env: Record<string, string> = {}): Promise<TestApp> {
  return makeTestApp({ AGENTD_SANDBOX: kind, ...env })
}

/** Calls the app as its admin. */
export function caller(t: TestApp, token = t.admin.token) {
  return async (method: string, path: string, body?: unknown) => {
    const res = await t.app.handle(req(method, path, { token, body }))
    return { status: res.status, body: await json(res), headers: res.headers }
  }
}

/** Waits until session `id` has `turns` turns and is not running; returns its view. */
export async function turnEnded(t: TestApp, id: string, turns = 1, timeoutMs = 50_000): Promise<any> {
  const call = caller(t)
  return settled(async () => (await call('GET', `/o/acme/p/_/sessions/${id}`)).body, { turns, timeoutMs, explain: () => whereItIs(t, id) })
}

/** Starts a session running `steps` (the scripted model's steps) and waits for its first turn to end. */
export async function runSession(t: TestApp, steps: unknown[], extra: Record<string, unknown> = {}): Promise<any> {
  const created = await caller(t)('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script(steps), ...extra })
  if (created.status !== 202) throw new Error(`create failed: ${created.status} ${JSON.stringify(created.body)}`)
  return turnEnded(t, created.body.execution_id, 1)
}

/**
 * Starts a session whose turn waits half a second before `steps` and returns its id once it runs: a
 * responsiveness window opened then measures the attack, not the sandbox's start (nor the garbage
 * collection a start's allocations set off, seen as 60-75 ms of the API thread on a loaded
 * machine with a gVisor start).
 */
export async function startRunning(t: TestApp, steps: unknown[]): Promise<string> {
  const call = caller(t)
  const created = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script([{ sleep: 500 }, ...steps]) })
  if (created.status !== 202) throw new Error(`create failed: ${created.status} ${JSON.stringify(created.body)}`)
  const id = created.body.execution_id as string
  await waitFor(
    async () => (await call('GET', `/o/acme/p/_/sessions/${id}`)).body.status,
    (status) => status !== 'queued' && status !== 'allocating',
    60_000,
  )
  return id
}

/** What a session that did not end got to: its events so far and its last log lines (for a failure's message). */
export async function whereItIs(t: TestApp, id: string): Promise<string> {
  const call = caller(t)
  const messages = await call('GET', `/o/acme/p/_/sessions/${id}/messages`)
  const events = ((messages.body?.events ?? []) as { type: string; role?: string; name?: string }[]).map((e) =>
    [e.type, e.role ?? e.name].filter(Boolean).join(':'),
  )
  const logs = await call('GET', `/o/acme/p/_/sessions/${id}/logs`)
  const lines = String(logs.body?.logs ?? JSON.stringify(logs.body)).slice(-1500)
  return `events so far: ${events.join(', ') || 'none'}\nlast logs: ${lines}\n${execOutput(t, id)}`
}

/**
 * On gVisor, what the sandbox's processes wrote to their output files (on its disk image), newest
 * last: tells a CLI that went quiet from output agentd did not read.
 */
function execOutput(t: TestApp, id: string): string {
  const io = join(t.dir, 'sandboxes', id, 'sandbox', 'disk', 'io')
  try {
    // The folder is the sandbox's: only regular files are read, a link planted there is not followed.
    const files = readdirSync(io)
      .filter((name) => name.endsWith('.out') || name.endsWith('.err'))
      .map((name) => ({ name, stat: lstatSync(join(io, name)) }))
      .filter(({ stat }) => stat.isFile())
      .sort((a, b) => a.stat.mtimeMs - b.stat.mtimeMs)
    const last = files.slice(-2).map(({ name }) => `${name}: …${readFileSync(join(io, name), 'utf8').slice(-400)}`)
    return `exec output files: ${files.map(({ name, stat }) => `${name} ${stat.size} B at ${new Date(stat.mtimeMs).toISOString()}`).join(', ')}\n${last.join('\n')}`
  } catch (err) {
    return `exec output files: none (${(err as Error).message})`
  }
}

/** Sends a follow-up running `steps` and waits for turn `turn` to end. */
export async function followUp(t: TestApp, id: string, steps: unknown[], turn: number): Promise<any> {
  const sent = await caller(t)('POST', `/o/acme/p/_/sessions/${id}/messages`, { content: script(steps) })
  if (sent.status !== 200) throw new Error(`follow-up failed: ${sent.status} ${JSON.stringify(sent.body)}`)
  return turnEnded(t, id, turn)
}

/** A file only the host has, whose content must never reach a tenant. */
export function hostCanary(): { dir: string; path: string; secret: string; [Symbol.dispose](): void } {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-canary-'))
  const secret = `host-canary-${crypto.randomUUID()}`
  const path = join(dir, 'canary.txt')
  writeFileSync(path, `${secret}\n`)
  return { dir, path, secret, [Symbol.dispose]: () => rmSync(dir, { recursive: true, force: true }) }
}

/**
 * Polls `url/healthz` from a separate process every 10 ms (so the poller never shares the server's
 * event loop), at a raised priority so a busy sandbox cannot starve the measurement itself.
 * `ready` resolves once it polls; `stop()` returns every latency in ms and the requests that failed.
 */
export function watchHealth(url: string): {
  ready: Promise<void>
  stop(): Promise<{ latencies: number[]; max: number; failures: number }>
} {
  const code = `
    const url = ${JSON.stringify(`${url}/healthz`)}
    const latencies = []; let failures = 0; let stopping = false
    process.stdin.on('data', () => { stopping = true })
    // One unmeasured request first: a fresh process pays for its own first connection and JIT.
    try { await (await fetch(url)).text() } catch {}
    process.stdout.write('ready\\n')
    while (!stopping) {
      const t0 = performance.now()
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(5000) })
        await res.text()
        if (!res.ok) failures++
      } catch { failures++ }
      latencies.push(performance.now() - t0)
      await new Promise((r) => setTimeout(r, 10))
    }
    process.stdout.write(JSON.stringify({ latencies, failures }))
    process.exit(0)
  `
  const proc = Bun.spawn(['nice', '-n', '-10', process.execPath, '-e', code], { stdin: 'pipe', stdout: 'pipe', stderr: 'inherit' })
  // stdout: a "ready" line, then the result as JSON.
  const reader = proc.stdout.getReader()
  const decoder = new TextDecoder()
  let text = ''
  const readUntil = async (enough: () => boolean) => {
    while (!enough()) {
      const chunk = await reader.read()
      if (chunk.done) return
      text += decoder.decode(chunk.value, { stream: true })
    }
  }
  const ready = readUntil(() => text.includes('\n'))
  return {
    ready,
    async stop() {
      proc.stdin.write('stop\n')
      await proc.stdin.flush()
      await ready
      await readUntil(() => false)
      const out = JSON.parse(text.slice(text.indexOf('\n') + 1)) as { latencies: number[]; failures: number }
      await proc.exited
      return { ...out, max: Math.max(0, ...out.latencies) }
    },
  }
}

/**
 * Readies a responsiveness window: spare sandboxes still being built finish first, and the garbage
 * earlier tests left (this worker process runs several files) is collected now, so the window
 * measures the attack and what it sets off rather than a refill or a collection it happened to
 * overlap (a 150 ms stretch was once seen in CI, not reproduced by hand).
 */
export async function quiesce(): Promise<void> {
  await settleSpares()
  Bun.gc(true)
}

/**
 * Watches this process's event loop (the in-process agentd's API thread) for stretches where it
 * could not serve a request, and tells apart the two reasons a stretch happens: the thread was busy
 * (agentd's own code, its GC: what a hostile sandbox must never be able to cause) or the machine
 * did not schedule it (other load on a shared 2-core machine, which no code of agentd's controls).
 * Ticks every 5 ms; at each tick reads the main thread's CPU time from /proc (schedstat, in ns).
 * `stop()` returns the longest wall gap and the most CPU the thread spent within one gap, in ms.
 */
export function watchLoop(): { stop(): { maxGapMs: number; maxBusyMs: number } } {
  // schedstat's first field: nanoseconds this thread has run on a CPU (exact, unlike stat's ticks).
  const schedstat = `/proc/self/task/${process.pid}/schedstat`
  const cpuMs = () => Number(readFileSync(schedstat, 'utf8').split(' ')[0]) / 1e6
  let lastWall = performance.now()
  let lastCpu = cpuMs()
  let maxGapMs = 0
  let maxBusyMs = 0
  const timer = setInterval(() => {
    const wall = performance.now()
    const cpu = cpuMs()
    maxGapMs = Math.max(maxGapMs, wall - lastWall)
    maxBusyMs = Math.max(maxBusyMs, cpu - lastCpu)
    lastWall = wall
    lastCpu = cpu
  }, 5)
  return {
    stop() {
      clearInterval(timer)
      return { maxGapMs, maxBusyMs }
    },
  }
}

/**
 * The most CPU the server's thread may spend without a break under an attack. A stalled or
 * recursing server spends seconds; agentd's own work between two breaks is a few ms on a quiet
 * machine, but on a loaded two-core one the same work costs more CPU time (shared caches, the
 * other core's sandboxes) and a 300 MB flood was measured at 103 ms there: 250 ms tells the two
 * apart on any machine.
 */
export const BUSY_BOUND_MS = 250

/**
 * The responsiveness bound of the flood and ReDoS attacks: every /healthz answered (none failed,
 * none took 5 s, which only a hung server does), and the server's thread never busy for
 * BUSY_BOUND_MS at a stretch. The wall-clock latencies are printed: on a quiet machine they stay under
 * 100 ms too, but on a loaded one the scheduler, not agentd, decides them (see watchLoop).
 */
export function expectResponsive(
  label: string,
  health: { latencies: number[]; max: number; failures: number },
  loop: { maxGapMs: number; maxBusyMs: number },
): void {
  const sorted = [...health.latencies].sort((a, b) => a - b)
  const p99 = sorted[Math.floor(sorted.length * 0.99)] ?? 0
  console.log(
    `${label}: /healthz ${health.latencies.length} polls, p99 ${p99.toFixed(1)} ms, max ${health.max.toFixed(1)} ms; server thread longest gap ${loop.maxGapMs.toFixed(0)} ms, busiest gap ${loop.maxBusyMs.toFixed(0)} ms of CPU`,
  )
  if (health.failures !== 0) throw new Error(`${label}: ${health.failures} /healthz requests failed`)
  if (health.latencies.length < 10) throw new Error(`${label}: only ${health.latencies.length} /healthz polls`)
  if (health.max >= 5000) throw new Error(`${label}: a /healthz took ${health.max.toFixed(0)} ms`)
  if (loop.maxBusyMs >= BUSY_BOUND_MS)
    throw new Error(`${label}: the server's thread was busy ${loop.maxBusyMs.toFixed(0)} ms without a break`)
}

/**
 * Runs `producer` with its stdout on the stdout of the CLI that runs this shell (the stream agentd
 * reads), found as the nearest ancestor whose command line has `--output-format stream-json`
 * (harness_1's flags; the bracket keeps the shells, whose command lines hold this script, from
 * matching). On bwrap that stream is a socket, which /proc/<pid>/fd/1 cannot reopen, so perl takes
 * the CLI's own descriptor with pidfd_getfd (and makes it blocking: the CLI left it non-blocking,
 * and the flood would stop at the first full buffer); gVisor has no pidfd_getfd, but its /proc
 * reopens the CLI's output file, for appending.
 */
export const toCliStdout = (producer: string) =>
  [
    `p=$PPID; while [ "$p" -gt 1 ] && ! tr '\\0' ' ' < /proc/$p/cmdline | grep -q -- '--output-format stream-[j]son'; do p=$(awk '/^PPid:/ {print $2}' /proc/$p/status); done; [ "$p" -gt 1 ] || exit 3`,
    `perl -MFcntl -e 'my $pfd = syscall(434, $ARGV[0] + 0, 0); exit 38 if $pfd < 0; my $fd = syscall(438, $pfd, 1, 0); exit 38 if $fd < 0; open(STDOUT, ">&=", $fd) or exit 38; fcntl(STDOUT, F_SETFL, fcntl(STDOUT, F_GETFL, 0) & ~O_NONBLOCK); exec("/bin/sh", "-c", $ARGV[1])' "$p" ${JSON.stringify(producer)}`,
    `[ $? -ne 38 ] || ${producer} >> /proc/$p/fd/1`,
  ].join('; ')

/**
 * Watches the server (this process) through an attack: the peak of its memory, /healthz from
 * outside and its thread's busy stretches. Started after a quiet moment; `stop` says what it saw.
 */
export async function watchServer(url: string): Promise<{
  stop(): Promise<{
    rssGrowth: number
    health: Awaited<ReturnType<ReturnType<typeof watchHealth>['stop']>>
    loop: ReturnType<ReturnType<typeof watchLoop>['stop']>
  }>
}> {
  await quiesce()
  const rssBefore = process.memoryUsage().rss
  let rssPeak = rssBefore
  const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 20)
  const health = watchHealth(url)
  await health.ready
  const loop = watchLoop()
  return {
    async stop() {
      clearInterval(sampler)
      const healthStats = await health.stop()
      const loopStats = loop.stop()
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss)
      return { rssGrowth: rssPeak - rssBefore, health: healthStats, loop: loopStats }
    },
  }
}

/**
 * Every live process's argv (NUL-separated), and the environment of those in our own pid namespace
 * (not a bwrap sandbox's: a sandboxed process has the sandbox's secrets in its environment by design).
 */
export function processTable(): { pid: string; cmdline: string; environ: string }[] {
  const ownNs = readlinkSync('/proc/self/ns/pid')
  const table: { pid: string; cmdline: string; environ: string }[] = []
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      const environ = readlinkSync(`/proc/${pid}/ns/pid`) === ownNs ? readFileSync(`/proc/${pid}/environ`, 'utf8') : ''
      table.push({ pid, cmdline, environ })
    } catch {
      // the process ended while we read it
    }
  }
  return table
}
