/**
 * Turn latency benchmark (issue 15): one trivial turn at a time (a `say` and an `answer` from the
 * scripted model) per harness, on the host's default driver (gVisor here) and on the `process`
 * driver in the same run, each on its own real server process. Prints create → first harness event
 * and create → completed p50/p95, the gVisor / process ratio, and where the time goes, per phase,
 * from the session's own timestamps in the database file:
 *   admit      create → allocating (queue and plan checks)
 *   sandbox    allocating → running (the sandbox is made)
 *   cli start  running → the CLI's first event (process start and the CLI's own init)
 *   to model   first event → the gateway's first request line
 *   model+end  that request → completed (replies, tool calls, the CLI's exit, capture)
 * gVisor runs with a warm sandbox waiting (AGENTD_WARM_SANDBOXES=1, with the CLI of the harness last
 * asked for started ahead in it, where it can be: AGENTD_WARM_CLI; each harness's first run, not
 * counted, is the create that turns it to that harness) and without (cold), side by side; warm runs
 * BENCH_TURN_WARM_GAP_MS (3000) apart.
 * Goals (issue 35, reported, never asserted), on gVisor warm: completed p50 under 1.0 s per harness
 * and ≤ 1.3 × process; create → first model request p50 under 300 ms.
 *
 *   bun bench/turn.ts    (env: BENCH_TURN_RUNS=8, BENCH_TURN_HARNESSES=harness_1,harness_2,harness_3,
 *                         BENCH_TURN_RUNSC=<path>: gVisor on that runsc as well, side by side)
 */
import { Database } from 'bun:sqlite'
import { join } from 'node:path'
import { removeDataDir } from '../test/helpers/cleanup'
import { script } from '../test/helpers/http'
import { runscBinary } from '../sandbox/gvisor/runsc-binary'
import { admin, client, seededDataDir, startServer } from '../test/helpers/server'

const RUNS = Number(process.env.BENCH_TURN_RUNS ?? 8)
const ALL_HARNESSES = ['harness_1', 'harness_2', 'harness_3'] as const
const HARNESSES = ALL_HARNESSES.filter((h) => (process.env.BENCH_TURN_HARNESSES ?? ALL_HARNESSES.join(',')).split(',').includes(h))
const PHASES = ['admit', 'sandbox', 'cli start', 'to model', 'model+end'] as const

interface Run {
  firstEvent: number
  /** create → the gateway's first model request line */
  firstModel: number
  completed: number
  phases: Record<(typeof PHASES)[number], number>
}

const quantile = (values: number[], q: number) =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(q * values.length))] ?? Number.NaN
const s = (ms: number) => `${(ms / 1000).toFixed(2)} s`

/**
 * Every harness's runs on one server with `env` (its driver), one turn at a time; `gapMs` apart
 * where a warm pool refills between them (as between a user's sessions), so each create finds its
 * warm sandbox booted and its started CLI loaded, not still starting from the run before.
 */
async function measure(env: Record<string, string>, gapMs = 0): Promise<{ driver: string; runs: Record<string, Run[]> }> {
  const { dir, token } = await seededDataDir('agentd-bench-turn')
  await admin(dir, 'plan', 'set', '--org', 'acme', '--max-concurrent', '100')
  const server = await startServer({ DATA_DIR: dir, ...env })
  const driver = /sandbox driver (\w+)/.exec(server.log())?.[1] ?? env.AGENTD_SANDBOX ?? '?'
  const call = client(() => server, token)
  const ids: Record<string, string[]> = {}
  try {
    for (const harness of HARNESSES) {
      ids[harness] = []
      for (let i = 0; i <= RUNS; i++) {
        await Bun.sleep(gapMs)
        const created = await call('POST', '/o/acme/p/_/sessions', {
          agent: harness,
          persistence: 'ephemeral',
          prompt: script([{ say: 'hi' }, { answer: `ok ${i}` }]),
        })
        const id = created.body.execution_id as string
        let status = created.body.status as string
        while (['queued', 'allocating', 'running'].includes(status)) {
          await Bun.sleep(20)
          status = (await call('GET', `/o/acme/p/_/sessions/${id}`)).body.status
        }
        if (status !== 'completed') throw new Error(`${harness} on ${driver}: ${status}`)
        if (i > 0) ids[harness]!.push(id) // the first run warms caches
      }
    }
  } finally {
    await server.stop()
  }
  const db = new Database(join(dir, 'agentd.db'), { readonly: true })
  const at = (id: string, where: string) =>
    (db.query(`SELECT min(created_at) AS t FROM session_events WHERE session_id = ? AND ${where}`).get(id) as { t: number | null }).t ??
    Number.NaN
  const runs: Record<string, Run[]> = {}
  for (const harness of HARNESSES) {
    runs[harness] = ids[harness]!.map((id) => {
      const created = (db.query('SELECT created_at AS t FROM sessions WHERE id = ?').get(id) as { t: number }).t
      const allocating = at(id, `kind = 'status' AND json_extract(data, '$.status') = 'allocating'`)
      const running = at(id, `kind = 'status' AND json_extract(data, '$.status') = 'running'`)
      const first = at(id, `kind = 'harness'`)
      const model = at(id, `kind = 'log' AND json_extract(data, '$.text') LIKE '%gateway: %'`)
      const done = at(id, `kind = 'status' AND json_extract(data, '$.status') = 'completed'`)
      return {
        firstEvent: first - created,
        firstModel: model - created,
        completed: done - created,
        phases: {
          admit: allocating - created,
          sandbox: running - allocating,
          'cli start': first - running,
          'to model': model - first,
          'model+end': done - model,
        },
      }
    })
  }
  db.close()
  await removeDataDir(dir)
  return { driver, runs }
}

// gVisor as a server runs it (a warm sandbox waiting: AGENTD_WARM_SANDBOXES), and without the pool.
const WARM_GAP_MS = Number(process.env.BENCH_TURN_WARM_GAP_MS ?? 3000)
const isolated = await measure({ AGENTD_SANDBOX: 'gvisor', AGENTD_WARM_SANDBOXES: '1' }, WARM_GAP_MS)
const cold = await measure({ AGENTD_SANDBOX: 'gvisor', AGENTD_WARM_SANDBOXES: '0' })
const bare = await measure({ AGENTD_SANDBOX: 'process' })
// BENCH_TURN_RUNSC=<path>: gVisor on that runsc too, side by side (a module build's systrap against Debian's ptrace, say).
const otherRunsc = process.env.BENCH_TURN_RUNSC
const other = otherRunsc
  ? await measure({ AGENTD_SANDBOX: 'gvisor', AGENTD_WARM_SANDBOXES: '1', AGENTD_RUNSC: otherRunsc }, WARM_GAP_MS)
  : null
console.log(
  `one trivial turn at a time (say + answer), ${RUNS} runs per harness after one warm-up; p50 / p95; runsc ${runscBinary()?.version} (${runscBinary()?.platform})`,
)
let met = true
const done = (runs: Run[]) => runs.map((r) => r.completed)
for (const harness of HARNESSES) {
  const a = isolated.runs[harness]!
  const b = bare.runs[harness]!
  const ratio = quantile(done(a), 0.5) / quantile(done(b), 0.5)
  met &&=
    quantile(done(a), 0.5) < 1000 &&
    ratio <= 1.3 &&
    quantile(
      a.map((r) => r.firstModel),
      0.5,
    ) < 300
  console.log(`${harness}`)
  const rows: [string, Run[]][] = [
    [`${isolated.driver} warm`, a],
    [`${cold.driver} cold`, cold.runs[harness]!],
    [bare.driver, b],
    ...(other ? [[`gvisor warm on ${otherRunsc}`, other.runs[harness]!] as [string, Run[]]] : []),
  ]
  for (const [label, runs] of rows) {
    const first = runs.map((r) => r.firstEvent)
    const model = runs.map((r) => r.firstModel)
    console.log(
      `  ${label.padEnd(11)} first event ${s(quantile(first, 0.5))} / ${s(quantile(first, 0.95))}   first model request ${s(quantile(model, 0.5))} / ${s(quantile(model, 0.95))}   completed ${s(quantile(done(runs), 0.5))} / ${s(quantile(done(runs), 0.95))}`,
    )
    console.log(
      `  ${''.padEnd(11)} phases p50: ${PHASES.map(
        (p) =>
          `${p} ${s(
            quantile(
              runs.map((r) => r.phases[p]),
              0.5,
            ),
          )}`,
      ).join(', ')}`,
    )
  }
  for (const [label, runs] of rows.slice(1)) {
    if (runs === b) continue
    console.log(`  completed p50 ratio ${label} / ${bare.driver}: ${(quantile(done(runs), 0.5) / quantile(done(b), 0.5)).toFixed(2)}x`)
  }
  console.log(`  completed p50 ratio ${isolated.driver} warm / ${bare.driver}: ${ratio.toFixed(2)}x`)
}
console.log(
  `goal (issue 35) on ${isolated.driver} warm, each harness: completed p50 < 1.0 s and ≤ 1.3 × ${bare.driver}, first model request p50 < 300 ms: ${met ? 'met' : 'MISSED'}`,
)
