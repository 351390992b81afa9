/**
 * HTTP benchmark (issue 2): requests per second of an authenticated `GET` of one session against
 * a bare `Bun.serve` hello-world measured in the same run, their ratio (goal >= 0.35), and
 * create-to-running latency p50/p95 with the `process` driver (goal: p50 < 100 ms).
 *
 * Both servers run in this process; the load comes from a separate process (wrk, installed from
 * Debian when missing and running as root; else oha or autocannon), so the generator does not
 * share the server's event loop. Missed goals are reported, never fatal.
 *
 *   bun bench/http.ts    (env: BENCH_DURATION=5 BENCH_ROUNDS=3 BENCH_WARMUP=2 BENCH_CONNECTIONS=50 BENCH_SAMPLES=40)
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../sandbox/process'
import { loadConfig } from '../src/config'
import { startServices } from '../src/server'

const DURATION_S = Number(process.env.BENCH_DURATION ?? 5)
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3)
const WARMUP_S = Number(process.env.BENCH_WARMUP ?? 2)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 50)
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 40)
const RATIO_GOAL = 0.35
const P50_GOAL_MS = 100

type Tool = 'wrk' | 'oha' | 'autocannon'

// ---------------------------------------------------------------- load generator (separate process)

function onPath(cmd: string): boolean {
  return Bun.which(cmd) !== null
}

function findLoadTool(): Tool | null {
  if (onPath('wrk')) return 'wrk'
  if (process.getuid?.() === 0 && onPath('apt-get')) {
    console.log('wrk is not installed; installing it from Debian (apt-get install -y wrk) ...')
    let r = Bun.spawnSync(['apt-get', 'install', '-y', '-q', 'wrk'], { stdout: 'ignore', stderr: 'pipe' })
    if (r.exitCode !== 0) {
      Bun.spawnSync(['apt-get', 'update', '-q'], { stdout: 'ignore', stderr: 'ignore' })
      r = Bun.spawnSync(['apt-get', 'install', '-y', '-q', 'wrk'], { stdout: 'ignore', stderr: 'pipe' })
    }
    if (r.exitCode === 0 && onPath('wrk')) return 'wrk'
    console.log(`apt-get install wrk failed: ${r.stderr.toString().trim().split('\n').pop()}`)
  }
  if (onPath('oha')) return 'oha'
  if (onPath('autocannon')) return 'autocannon'
  return null
}

/** Runs the tool against `url` and returns requests per second (2xx only where the tool can tell). */
async function loadTest(
  tool: Tool,
  url: string,
  headers: Record<string, string>,
  seconds: number,
): Promise<{ rps: number; errors: string | null }> {
  const h = Object.entries(headers)
  let argv: string[]
  if (tool === 'wrk') {
    argv = ['wrk', '-t', '1', '-c', String(CONNECTIONS), '-d', `${seconds}s`, ...h.flatMap(([k, v]) => ['-H', `${k}: ${v}`]), url]
  } else if (tool === 'oha') {
    argv = ['oha', '--no-tui', '-j', '-c', String(CONNECTIONS), '-z', `${seconds}s`, ...h.flatMap(([k, v]) => ['-H', `${k}: ${v}`]), url]
  } else {
    argv = ['autocannon', '-j', '-c', String(CONNECTIONS), '-d', String(seconds), ...h.flatMap(([k, v]) => ['-H', `${k}=${v}`]), url]
  }
  const proc = Bun.spawn(argv, { stdout: 'pipe', stderr: 'pipe' })
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  if (code !== 0) throw new Error(`${tool} exited ${code}: ${err.trim() || out.trim()}`)
  if (tool === 'wrk') {
    const rps = Number(/Requests\/sec:\s*([\d.]+)/.exec(out)?.[1])
    const non2xx = /Non-2xx or 3xx responses:\s*(\d+)/.exec(out)?.[1]
    const sockErr = /Socket errors:[^\n]*/.exec(out)?.[0]
    const errors = [non2xx ? `${non2xx} non-2xx responses` : null, sockErr ?? null].filter(Boolean).join('; ')
    return { rps, errors: errors || null }
  }
  const json = JSON.parse(out)
  if (tool === 'oha') {
    const codes = json.statusCodeDistribution ?? {}
    const bad = Object.entries(codes).filter(([c]) => !c.startsWith('2'))
    return { rps: json.summary.requestsPerSec, errors: bad.length ? `status codes ${JSON.stringify(codes)}` : null }
  }
  return { rps: json.requests.average, errors: json.non2xx ? `${json.non2xx} non-2xx responses` : null }
}

// ---------------------------------------------------------------- helpers

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN
  const rank = Math.ceil((p / 100) * sorted.length) - 1
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank))]!
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)))
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')
  return [line(rows[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n')
}

/** A session still busy with a run; anything else counts as settled for this bench. */
const BUSY = new Set(['queued', 'allocating', 'running'])

// ---------------------------------------------------------------- setup

const dir = mkdtempSync(join(tmpdir(), 'agentd-bench-'))
const config = loadConfig({ DATA_DIR: dir })
const services = await startServices(config, { driver: new ProcessDriver(), log: () => {} })
await services.ready
services.identity.createOrg('bench')
const { token } = services.identity.createUser('bench', 'admin@bench.test', 'admin')
// Bound to no repository: this server has no GitHub App (a bound Project's runs would be 403 INSTALLATION_NOT_LINKED).
services.identity.createProject('bench', 'web', null)
services.plans.setPlan('bench', { maxConcurrent: 1000 })

const agentd = services.app.listen({ hostname: '127.0.0.1', port: 0 })
const base = `http://127.0.0.1:${agentd.server!.port}`
const hello = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response('Hello, World!') })
const helloUrl = `http://127.0.0.1:${hello.port}/`
const auth = { authorization: `Bearer ${token}` }
const apiKey = await (async () => {
  const res = await services.app.handle(
    new Request('http://localhost/o/bench/api-keys', {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench' }),
    }),
  )
  const body = (await res.json()) as { secret?: string }
  if (res.status !== 201 || !body.secret) throw new Error(`API key create answered ${res.status}: ${JSON.stringify(body)}`)
  return body.secret
})()

async function createSession(prompt: string) {
  const res = await fetch(`${base}/o/bench/p/web/sessions`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ agent: 'harness_1', prompt }),
  })
  const body = (await res.json()) as { execution_id: string; status: string }
  if (res.status !== 202) throw new Error(`create answered ${res.status}: ${JSON.stringify(body)}`)
  return body
}

async function cancelSession(id: string) {
  const res = await fetch(`${base}/o/bench/p/web/sessions/${id}`, {
    method: 'PATCH',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ status: 'cancelled' }),
  })
  await res.body?.cancel()
}

async function waitSettled(id: string, timeoutMs: number): Promise<string> {
  const start = performance.now()
  for (;;) {
    const status = services.store.get(id)?.status ?? 'missing'
    if (!BUSY.has(status) || performance.now() - start > timeoutMs) return status
    await Bun.sleep(20)
  }
}

let exitNote = ''
try {
  console.log(`agentd bench/http: Bun ${Bun.version}, ${navigator.hardwareConcurrency} CPUs, data in ${dir}`)

  // One session to read; let its run end so the claude process does not compete for CPU.
  const session = await createSession('hello')
  const sessionUrl = `${base}/o/bench/p/web/sessions/${session.execution_id}`
  let settled = await waitSettled(session.execution_id, 30_000)
  if (BUSY.has(settled)) {
    // A run that has not ended would compete with the server for CPU during the load test.
    console.log(`session ${session.execution_id} still ${settled} after 30s; cancelling it before the load test`)
    await cancelSession(session.execution_id)
    settled = await waitSettled(session.execution_id, 10_000)
  }
  const check = await fetch(sessionUrl, { headers: auth })
  if (check.status !== 200) throw new Error(`GET session answered ${check.status}: ${await check.text()}`)
  console.log(`session ${session.execution_id} is ${settled}; GET answers 200 with ${(await check.text()).length} bytes`)

  // ------------------------------------------------------------ throughput
  const tool = findLoadTool()
  const rpsRows: string[][] = []
  let ratioLine: string[] | null = null
  if (!tool) {
    console.log(
      'No load generator found (wrk, oha or autocannon) and wrk could not be installed; skipping the requests-per-second part.\n' +
        'Install one (Debian: apt-get install -y wrk; npm: npm i -g autocannon) and run again.',
    )
  } else {
    console.log(`\nload: ${tool}, ${CONNECTIONS} connections, ${ROUNDS} rounds of ${DURATION_S}s per target after a ${WARMUP_S}s warm-up`)
    const targets = [
      { name: 'Bun.serve hello-world', url: helloUrl, headers: {} },
      { name: 'agentd GET session (auth)', url: sessionUrl, headers: auth },
      // As a server holding an API key polls; not part of the goal.
      { name: 'agentd GET session (API key)', url: sessionUrl, headers: { authorization: `Bearer ${apiKey}` } },
    ]
    // Alternate the two targets for several rounds: each round's ratio compares measurements taken
    // seconds apart, so background load on a shared machine skews it less. Medians are reported.
    for (const target of targets) if (WARMUP_S > 0) await loadTest(tool, target.url, target.headers, WARMUP_S)
    const perTarget: number[][] = targets.map(() => [])
    const ratios: number[] = []
    for (let round = 0; round < ROUNDS; round++) {
      for (const [i, target] of targets.entries()) {
        const result = await loadTest(tool, target.url, target.headers, DURATION_S)
        if (result.errors) console.log(`  ${target.name}: ${result.errors}`)
        perTarget[i]!.push(result.rps)
      }
      ratios.push(perTarget[1]![round]! / perTarget[0]![round]!)
      console.log(
        `  round ${round + 1}: hello-world ${fmt(perTarget[0]![round]!)} req/s, agentd ${fmt(perTarget[1]![round]!)} req/s, ratio ${fmt(ratios[round]!, 3)}` +
          ` (with an API key ${fmt(perTarget[2]![round]!)} req/s)`,
      )
    }
    for (const [i, target] of targets.entries()) rpsRows.push([target.name, fmt(median(perTarget[i]!))])
    const ratio = median(ratios)
    ratioLine = [
      `ratio agentd / hello-world (median of ${ROUNDS})`,
      fmt(ratio, 3),
      `>= ${RATIO_GOAL}`,
      ratio >= RATIO_GOAL ? 'goal met' : 'goal missed',
    ]
  }

  // ------------------------------------------------------------ create-to-running latency
  // From just before the POST until the session's status is first seen as `running` in the
  // service (polled every 1 ms; a response that already says `running` counts at its arrival).
  // Each sampled session is cancelled once seen running, so runs do not pile up on the CPU.
  const latencies: number[] = []
  const odd: string[] = []
  for (let i = 0; i < SAMPLES; i++) {
    const t0 = performance.now()
    const created = await createSession(`hello ${i}`)
    let seenAt = performance.now()
    let status = created.status
    while (status === 'queued' || status === 'allocating') {
      await Bun.sleep(1)
      seenAt = performance.now()
      status = services.store.get(created.execution_id)?.status ?? 'missing'
      if (seenAt - t0 > 30_000) break
    }
    if (status === 'running') latencies.push(seenAt - t0)
    else {
      const error = services.store.get(created.execution_id)?.error
      odd.push(`${created.execution_id}: ${status}${error ? ` (${error})` : ''}`)
    }
    await cancelSession(created.execution_id)
    await waitSettled(created.execution_id, 10_000)
  }
  if (odd.length) console.log(`\n${odd.length} sample(s) never seen running, e.g.:\n  ${odd.slice(0, 3).join('\n  ')}`)
  latencies.sort((a, b) => a - b)
  const p50 = percentile(latencies, 50)
  const p95 = percentile(latencies, 95)

  // ------------------------------------------------------------ report
  const rows: string[][] = [['measure', 'value', 'goal', 'verdict']]
  for (const [name, value] of rpsRows) rows.push([`${name} (req/s, median)`, value!, '', ''])
  if (ratioLine) rows.push(ratioLine)
  else rows.push(['ratio agentd / hello-world', 'n/a', `>= ${RATIO_GOAL}`, 'not measured'])
  const measured = latencies.length > 0
  rows.push([
    `create-to-running p50 (ms, n=${latencies.length})`,
    measured ? fmt(p50, 1) : 'n/a',
    `< ${P50_GOAL_MS}`,
    !measured ? 'not measured' : p50 < P50_GOAL_MS ? 'goal met' : 'goal missed',
  ])
  rows.push([`create-to-running p95 (ms, n=${latencies.length})`, measured ? fmt(p95, 1) : 'n/a', '', ''])
  console.log(`\n${table(rows)}`)
} catch (err) {
  exitNote = `bench/http failed: ${(err as Error).stack ?? err}`
} finally {
  hello.stop(true)
  await agentd.stop()
  await services.close()
  rmSync(dir, { recursive: true, force: true })
}
if (exitNote) {
  console.error(exitNote)
  process.exit(1)
}
