/**
 * The kill -9 campaign for webhooks (issue 33): rounds of key runs (short turns, turns with a
 * follow-up queued, a turn paused mid-way, long turns) on one real server (bubblewrap), killed
 * with SIGKILL at a random moment each round and started again on the same DATA_DIR. After each
 * round settles, every turn that ended (each settled run's turns, a lost one included; a run that
 * failed before its first turn counts one) must have been delivered to the receiver under exactly
 * one webhook-id. Prints per round what was expected, delivered, missing and sent twice (the same
 * webhook-id again: an attempt the kill cut after the receiver had it, which receivers dedupe).
 * Exits 1 when a turn's webhook is missing or one id stands for two turns.
 *
 *   bun bench/kill-webhooks.ts    (env: BENCH_KILL_ROUNDS=10, BENCH_KILL_DRIVER=bwrap)
 */
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { removeDataDir } from '../test/helpers/cleanup'
import { script } from '../test/helpers/http'
import { startReceiver } from '../test/helpers/keys'
import { admin, startServer, type RunningServer } from '../test/helpers/server'

const ROUNDS = Number(process.env.BENCH_KILL_ROUNDS ?? 10)
const driver = process.env.BENCH_KILL_DRIVER ?? 'bwrap'
const dir = mkdtempSync(join(tmpdir(), 'agentd-bench-kill-'))
const env = { DATA_DIR: dir, AGENTD_SANDBOX: driver, AGENTD_WEBHOOK_ALLOW_PRIVATE: '1', AGENTD_TIME_SCALE: '0.01' }
await admin(dir, 'org', 'create', 'acme')
await admin(dir, 'plan', 'set', '--org', 'acme', '--max-concurrent', '100')
const token = (await admin(dir, 'user', 'create', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'admin')).json.token as string
const rx = startReceiver()
let server: RunningServer = await startServer(env)
const call = async (method: string, path: string, bearer: string, body?: unknown) => {
  for (let tries = 0; ; tries++) {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    // Right after a restart requests wait for the previous run's sessions; past 5 s they are 503.
    if (res.status === 503 && tries < 20) {
      await Bun.sleep(250)
      continue
    }
    return { status: res.status, body: (await res.json().catch(() => null)) as any }
  }
}
const key = (await call('POST', '/o/acme/api-keys', token, { name: 'campaign', max_concurrent: 100 })).body
await call('PATCH', `/o/acme/api-keys/${key.id}`, token, { webhook_url: rx.url })
const runs: string[] = []
const random = (min: number, max: number) => min + Math.random() * (max - min)
let failedRounds = 0

try {
  for (let round = 1; round <= ROUNDS; round++) {
    const mine: string[] = []
    const start = async (steps: unknown[]) => {
      const created = await call('POST', '/o/acme/p/_/sessions', key.secret, { agent: 'harness_2', prompt: script(steps) })
      if (created.status !== 202) throw new Error(`create: ${created.status} ${JSON.stringify(created.body)}`)
      mine.push(created.body.execution_id)
      return created.body.execution_id as string
    }
    for (let i = 0; i < 2; i++) await start([{ answer: `short ${round}.${i}` }])
    for (let i = 0; i < 2; i++) {
      const id = await start([{ say: 'working' }, { sleep: Math.round(random(200, 2500)) }, { answer: 'first' }])
      await call('POST', `/o/acme/p/_/sessions/${id}/messages`, key.secret, { content: script([{ answer: 'follow-up' }]) })
    }
    const paused = await start([{ say: 'working' }, { sleep: 30_000 }, { answer: 'never' }])
    await start([{ say: 'long' }, { sleep: Math.round(random(500, 4000)) }, { answer: 'long' }])
    await Bun.sleep(Math.round(random(300, 1500)))
    await call('PATCH', `/o/acme/p/_/sessions/${paused}`, key.secret, { status: 'paused' })
    await Bun.sleep(Math.round(random(0, 1500)))
    await server.stop('SIGKILL')
    server = await startServer(env)
    runs.push(...mine)
    // Settled: no run mid-way (a paused one rests paused), and the receiver quiet for a while.
    const deadline = Date.now() + 120_000
    for (;;) {
      const views = await Promise.all(runs.map((id) => call('GET', `/o/acme/p/_/sessions/${id}`, key.secret).then((r) => r.body)))
      if (views.every((v) => !['queued', 'allocating', 'running'].includes(v.status))) break
      if (Date.now() > deadline) throw new Error(`round ${round}: runs did not settle`)
      await Bun.sleep(250)
    }
    let seen = -1
    while (seen !== rx.requests.length) {
      seen = rx.requests.length
      await Bun.sleep(1500)
    }
    const views = await Promise.all(runs.map((id) => call('GET', `/o/acme/p/_/sessions/${id}`, key.secret).then((r) => r.body)))
    const expected = views.reduce((sum, v) => sum + Math.max(v.turns_count, v.status === 'failed' ? 1 : 0), 0)
    const byId = new Map<string, number>()
    const idsOfRun = new Map<string, Set<string>>()
    for (const r of rx.requests) {
      const id = r.headers['webhook-id']!
      byId.set(id, (byId.get(id) ?? 0) + 1)
      const run = JSON.parse(r.body).data.run_id as string
      idsOfRun.set(run, (idsOfRun.get(run) ?? new Set()).add(id))
    }
    const delivered = [...idsOfRun.entries()].filter(([run]) => runs.includes(run)).reduce((sum, [, ids]) => sum + ids.size, 0)
    const twice = [...byId.values()].filter((n) => n > 1).length
    const missing = views.filter((v) => (idsOfRun.get(v.execution_id)?.size ?? 0) < Math.max(v.turns_count, v.status === 'failed' ? 1 : 0))
    const ok = missing.length === 0 && delivered === expected
    if (!ok) failedRounds++
    console.log(
      `round ${round}: ${runs.length} runs, ${expected} turns ended, ${delivered} delivered (distinct webhook-ids), ${missing.length} runs missing one, ${twice} ids sent twice: ${ok ? 'ok' : 'LOST OR EXTRA'}`,
    )
    for (const v of missing)
      console.log(`  missing: ${v.execution_id} ${v.status} turns ${v.turns_count}, delivered ${idsOfRun.get(v.execution_id)?.size ?? 0}`)
  }
  console.log(`${ROUNDS - failedRounds} of ${ROUNDS} rounds with every finished turn delivered exactly once (${driver})`)
} finally {
  await server.stop()
  rx.stop()
  await removeDataDir(dir)
}
process.exit(failedRounds === 0 ? 0 : 1)
