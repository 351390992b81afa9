/**
 * Pause mid-request benchmark (issue 15, part 3): on gVisor, turns of PER_TURN model requests (each
 * answered after MODEL_MS), one pause and resume landing inside every request (every fourth lasting
 * past the reply), against the same turns without pauses in the same run. Prints how many pauses
 * came back, how many turns completed with their own answer, whether the generation went up by one
 * per resume, the time a pause and a resume took, and where a turn stalled if one did (a turn whose
 * CLI makes no next request for STALL_MS). Goal (reported, never asserted): 20 of 20.
 *
 *   bun bench/pause.ts    (env: BENCH_PAUSE_TURNS=2, BENCH_PAUSE_PER_TURN=10, BENCH_PAUSE_HARNESS=harness_2)
 */
import { existsSync, readdirSync } from 'node:fs'
import { makeTestApp } from '../test/helpers/app'
import { json, req, script } from '../test/helpers/http'
import { runscBinary, runscPath } from '../sandbox/gvisor/runsc-binary'

const TURNS = Number(process.env.BENCH_PAUSE_TURNS ?? 2)
const PER_TURN = Number(process.env.BENCH_PAUSE_PER_TURN ?? 10)
const HARNESS = process.env.BENCH_PAUSE_HARNESS ?? 'harness_2'
const MODEL_MS = 600
const STALL_MS = 30_000

await using t = await makeTestApp({ AGENTD_SANDBOX: 'gvisor' })
const path = (id: string, rest = '') => `/o/acme/p/_/sessions/${id}${rest}`
const call = (method: string, url: string, body?: unknown) => t.app.handle(req(method, url, { token: t.admin.token, body }))
const get = async (id: string) => json(await call('GET', path(id)))
const logs = async (id: string): Promise<string> => (await json(await call('GET', path(id, '/logs')))).logs ?? ''
/** Model requests that reached the gateway (its arrival lines in the session log). */
const requests = (text: string) =>
  text.split('\n').filter((line) => line.includes(' gateway: POST ') && !line.includes(' answered ')).length
const turn = (n: number) =>
  script([
    ...Array.from({ length: PER_TURN - 1 }, (_, i) => [{ sleep: MODEL_MS }, { bash: `echo ${n}.${i}` }]).flat(),
    { sleep: MODEL_MS },
    { answer: `answer ${n}` },
  ])

/** Polls `read` until `done`, or null after `ms`. */
async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, ms = STALL_MS): Promise<T | null> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    const value = await read()
    if (done(value)) return value
    await Bun.sleep(20)
  }
  return null
}

interface Outcome {
  pauses: number
  turns: number
  generationOk: boolean
  pauseMs: number[]
  resumeMs: number[]
  stall: string | null
}

async function run(pausing: boolean): Promise<Outcome> {
  const out: Outcome = { pauses: 0, turns: 0, generationOk: true, pauseMs: [], resumeMs: [], stall: null }
  const id = (await json(await call('POST', '/o/acme/p/_/sessions', { agent: HARNESS, prompt: turn(1) }))).execution_id as string
  let generation = 0
  let asked = 0
  for (let n = 1; n <= TURNS; n++) {
    if (n > 1) {
      await call('POST', path(id, '/messages'), { content: turn(n) })
      if (
        pausing &&
        !(await until(
          () => get(id),
          (s) => s.sandbox_generation === generation + 1,
        ))
      )
        return { ...out, stall: `turn ${n}: the follow-up did not wake the sandbox` }
      if (pausing) generation++
    }
    for (let k = 1; k <= PER_TURN; k++) {
      asked++
      if (
        !(await until(
          () => logs(id),
          (text) => requests(text) >= asked,
        ))
      ) {
        return { ...out, stall: `turn ${n}: model request ${k} never came (after ${out.pauses} pauses)\n${await insideView(id)}` }
      }
      if (!pausing) continue
      let started = performance.now()
      await call('PATCH', path(id), { status: 'paused' })
      const paused = await until(
        () => get(id),
        (s) => s.machine_state === 'paused',
      )
      if (!paused) return { ...out, stall: `turn ${n}: pause ${k} did not land` }
      out.pauseMs.push(performance.now() - started)
      if (paused.sandbox_generation !== generation) out.generationOk = false
      if (asked % 4 === 0) await Bun.sleep(MODEL_MS + 300) // the reply comes while frozen
      started = performance.now()
      await call('PATCH', path(id), { status: 'running' })
      if (
        !(await until(
          () => get(id),
          (s) => s.sandbox_generation === generation + 1,
        ))
      )
        return { ...out, stall: `turn ${n}: resume ${k} did not land` }
      out.resumeMs.push(performance.now() - started)
      generation++
      out.pauses++
    }
    const done = await until(
      () => get(id),
      (s) => s.turns_count === n && s.status !== 'running' && s.status !== 'paused',
    )
    if (!done) return { ...out, stall: `turn ${n} did not end` }
    const answer = (await json(await call('GET', path(id, '/result')))).result?.text
    if (done.status === 'completed' && answer === `answer ${n}`) out.turns++
  }
  return out
}

/** What a stalled turn's sandbox runs (runsc ps of every container of this run's gVisor driver) and the end of the session log. */
async function insideView(id: string): Promise<string> {
  const lines: string[] = []
  for (const scope of readdirSync('/run/agentd').filter((name) => existsSync(`/run/agentd/${name}/runsc`))) {
    const root = `/run/agentd/${scope}/runsc`
    const list = Bun.spawnSync([runscPath(), `--root=${root}`, 'list', '-quiet'], { timeout: 10_000 })
      .stdout.toString()
      .trim()
    for (const cid of list.split('\n').filter(Boolean)) {
      const ps = Bun.spawnSync([runscPath(), `--root=${root}`, 'ps', cid], { timeout: 10_000 })
      lines.push(
        `  runsc ps ${cid}:`,
        ...`${ps.stdout}${ps.stderr}`
          .trim()
          .split('\n')
          .map((l) => `    ${l}`),
      )
      const states = Bun.spawnSync(
        [
          runscPath(),
          `--root=${root}`,
          'exec',
          cid,
          '/bin/sh',
          '-c',
          'for d in /proc/[0-9]*; do echo "$d $(grep -E "^(Name|State|SigPnd|ShdPnd|SigBlk)" $d/status | tr "\\n" " ")"; done',
        ],
        { timeout: 10_000 },
      )
      lines.push(
        '  states:',
        ...`${states.stdout}${states.stderr}`
          .trim()
          .split('\n')
          .map((l) => `    ${l}`),
      )
      const before = requests(await logs(id))
      Bun.spawnSync([runscPath(), `--root=${root}`, 'kill', '--all', cid, 'CONT'], { timeout: 10_000 })
      await Bun.sleep(5000)
      lines.push(`  another SIGCONT to all: ${requests(await logs(id)) > before ? 'the next request came' : 'still no request'}`)
      Bun.spawnSync([runscPath(), `--root=${root}`, 'kill', '--all', cid, 'CHLD'], { timeout: 10_000 })
      await Bun.sleep(5000)
      lines.push(`  then SIGCHLD to all: ${requests(await logs(id)) > before ? 'the next request came' : 'still no request'}`)
    }
  }
  lines.push(
    '  session log, last lines:',
    ...(await logs(id))
      .trim()
      .split('\n')
      .slice(-15)
      .map((l) => `    ${l.slice(0, 200)}`),
  )
  return lines.join('\n')
}

const p50 = (values: number[]) => ([...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN).toFixed(0)
console.log(
  `pause bench: ${TURNS} turns of ${PER_TURN} model requests (${MODEL_MS} ms each), gVisor (runsc ${runscBinary()?.version}, ${runscBinary()?.platform}), ${HARNESS}, load average ${(await Bun.file('/proc/loadavg').text()).split(' ').slice(0, 3).join(' ')}`,
)
for (const pausing of [true, false]) {
  const o = await run(pausing)
  const label = pausing ? 'paused mid-request' : 'no pauses (control)'
  console.log(`\n${label}`)
  if (pausing) {
    console.log(`  pauses that came back   ${o.pauses} of ${TURNS * PER_TURN}`)
    console.log(`  generation +1 per resume ${o.generationOk ? 'yes' : 'NO'}`)
    console.log(`  pause p50 ${p50(o.pauseMs)} ms, resume p50 ${p50(o.resumeMs)} ms`)
  }
  console.log(`  turns completed with their answer  ${o.turns} of ${TURNS}`)
  console.log(`  stalled: ${o.stall ?? 'no'}`)
  if (pausing)
    console.log(
      `  goal ${TURNS * PER_TURN} of ${TURNS * PER_TURN} pauses, every turn completed: ${o.pauses === TURNS * PER_TURN && o.turns === TURNS && o.generationOk ? 'met' : 'MISSED'}`,
    )
}
