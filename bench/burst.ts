/**
 * Burst benchmark (issue 15): trivial ephemeral runs created as fast as the API accepts them on a
 * real server process with the host's default driver and capacity (the org's plan raised out of
 * the way), then every run followed to its end. Prints how many completed and failed (with each
 * distinct error), runs per minute, queue wait (create → admitted) p50/p95 from the database file,
 * and the peak RSS of the server and every process of its sandboxes, sampled every 250 ms.
 * The same burst then runs on the process driver, side by side in one run.
 * Goals (reported, never asserted): all completed, at least 30 runs/minute, peak RSS under 8 GiB;
 * and (issue 35) runs per minute on gVisor at least 0.8 × the process driver's.
 *
 *   bun bench/burst.ts    (env: BENCH_BURST_RUNS=300, BENCH_BURST_HARNESS=harness_1, and
 *                          AGENTD_MAX_SANDBOXES / AGENTD_MAX_STARTING / AGENTD_WARM_SANDBOXES
 *                          passed to the server)
 */
import { Database } from 'bun:sqlite'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { sandboxScope } from '../src/server'
import { removeDataDir } from '../test/helpers/cleanup'
import { script } from '../test/helpers/http'
import { admin, client, seededDataDir, startServer } from '../test/helpers/server'

const RUNS = Number(process.env.BENCH_BURST_RUNS ?? 300)
const HARNESS = process.env.BENCH_BURST_HARNESS ?? 'harness_1'

// The host's capacity as agentd derives it, unless the bench's own environment sets it.
const capacityEnv = Object.fromEntries(
  ['AGENTD_MAX_SANDBOXES', 'AGENTD_MAX_STARTING', 'AGENTD_WARM_SANDBOXES'].flatMap((k) => (process.env[k] ? [[k, process.env[k]!]] : [])),
)

/** One burst on a fresh server with `driver`; its runs per minute (NaN when it did not complete them all). */
async function burst(driver: string): Promise<number> {
  const { dir, token } = await seededDataDir('agentd-bench-burst')
  await admin(dir, 'plan', 'set', '--org', 'acme', '--max-concurrent', '100000')
  const server = await startServer({ DATA_DIR: dir, AGENTD_SANDBOX: driver, ...capacityEnv })
  const call = client(() => server, token)
  const capacity = /host capacity: [^\n]*/.exec(server.log())?.[0] ?? 'host capacity: (not logged)'

  /** RSS of the server and of every process whose command line or folder names its data or run folders. */
  function treeRss(): number {
    const marks = [dir, sandboxScope(dir)]
    let total = 0
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue
      try {
        const mine = Number(entry) === server.proc.pid || marks.some((m) => readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(m))
        if (!mine) continue
        const rss = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${entry}/status`, 'utf8'))
        total += rss ? Number(rss[1]) * 1024 : 0
      } catch {
        // gone meanwhile
      }
    }
    return total
  }

  let peakRss = 0
  const sampler = setInterval(() => (peakRss = Math.max(peakRss, treeRss())), 250)
  const started = performance.now()
  const ids: string[] = []
  const refused: string[] = []
  try {
    for (let i = 0; i < RUNS; i++) {
      const res = await call('POST', '/o/acme/p/_/sessions', {
        agent: HARNESS,
        persistence: 'ephemeral',
        prompt: script([{ answer: `run ${i}` }]),
      })
      if (res.status === 202) ids.push(res.body.execution_id)
      else refused.push(`${res.status} ${res.body?.code ?? ''}`)
    }
    const created = performance.now()
    const ended = new Map<string, { status: string; error: string | null }>()
    while (ended.size < ids.length) {
      for (const id of ids) {
        if (ended.has(id)) continue
        const view = (await call('GET', `/o/acme/p/_/sessions/${id}`)).body
        if (!['queued', 'allocating', 'running'].includes(view.status)) ended.set(id, { status: view.status, error: view.error })
      }
      await Bun.sleep(500)
    }
    const finished = performance.now()
    clearInterval(sampler)

    const db = new Database(join(dir, 'agentd.db'), { readonly: true })
    const waits = db
      .query(
        `SELECT min(e.created_at) - s.created_at AS wait FROM sessions s JOIN session_events e ON e.session_id = s.id
       WHERE e.kind = 'status' AND json_extract(e.data, '$.status') = 'allocating' GROUP BY s.id`,
      )
      .all()
      .map((row) => (row as { wait: number }).wait)
      .sort((a, b) => a - b)
    db.close()
    const q = (p: number) => waits[Math.min(waits.length - 1, Math.floor(p * waits.length))] ?? Number.NaN
    const completed = [...ended.values()].filter((e) => e.status === 'completed').length
    const errors = new Map<string, number>()
    for (const e of ended.values())
      if (e.status !== 'completed')
        errors.set(`${e.status}: ${e.error ?? ''}`.slice(0, 160), (errors.get(`${e.status}: ${e.error ?? ''}`.slice(0, 160)) ?? 0) + 1)
    const minutes = (finished - started) / 60_000
    const perMinute = completed / minutes

    console.log(
      `${driver}: ${RUNS} trivial ephemeral ${HARNESS} runs, created in ${((created - started) / 1000).toFixed(1)} s; ${capacity}`,
    )
    console.log(
      `  completed ${completed}, not completed ${ids.length - completed}, refused at create ${refused.length}${refused.length ? ` (${[...new Set(refused)].join(', ')})` : ''}`,
    )
    for (const [error, n] of errors) console.log(`    ${n} × ${error}`)
    console.log(`  all ended after ${(minutes * 60).toFixed(0)} s: ${perMinute.toFixed(1)} runs/minute`)
    console.log(`  queue wait (create → admitted) p50 ${(q(0.5) / 1000).toFixed(1)} s, p95 ${(q(0.95) / 1000).toFixed(1)} s`)
    console.log(`  peak RSS of the server and its sandboxes ${(peakRss / 1024 ** 3).toFixed(2)} GiB`)
    const met = completed === RUNS && perMinute >= 30 && peakRss < 8 * 1024 ** 3
    console.log(`  goal all completed, ≥ 30 runs/minute, peak RSS < 8 GiB: ${met ? 'met' : 'MISSED'}`)
    return completed === RUNS ? perMinute : Number.NaN
  } finally {
    clearInterval(sampler)
    await server.stop()
    await removeDataDir(dir)
  }
}

const isolated = await burst('gvisor')
const bare = await burst('process')
const ratio = isolated / bare
console.log(`runs per minute gvisor / process: ${ratio.toFixed(2)}x; goal (issue 35) ≥ 0.8x: ${ratio >= 0.8 ? 'met' : 'MISSED'}`)
