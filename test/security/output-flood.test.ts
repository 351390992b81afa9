/**
 * Attack: the sandbox floods the stdout stream agentd reads (the CLI's, not a tool's, which the CLI
 * would cap itself) with one 300 MB line and no newline, or with 10 MB of short lines; and a turn
 * prints more than its transcript may hold. agentd must keep serving every tenant, keep its
 * memory, cut the long line (saying so in the transcript) and stop storing raw lines past
 * AGENTD_TRANSCRIPT_MAX_MB while it still parses them.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { getPriority, setPriority } from 'node:os'
import type { TestApp } from '../helpers/app'
import {
  caller,
  expectResponsive,
  ISOLATING,
  quiesce,
  runSession,
  securityApp,
  startRunning,
  toCliStdout,
  turnEnded,
  watchHealth,
  watchLoop,
} from './helpers'

const FLOOD_BYTES = 300_000_000
/**
 * The flood's bytes, 'a' only: 100 MB made once in the sandbox's /tmp, then printed three times
 * by `cat` in large writes (a `tr` in the pipe writes 4 KiB at a time, which gVisor takes 13 s for).
 */
const FLOOD_PREP = `head -c 1000000 /dev/zero | tr '\\0' a > /tmp/a1 && for i in 0 1 2 3 4 5 6 7 8 9; do cat${' /tmp/a1'.repeat(10)}; done > /tmp/a100`
const FLOOD = 'cat /tmp/a100 /tmp/a100 /tmp/a100'
const MiB = 1024 * 1024
/** AGENTD_TRANSCRIPT_MAX_MB of the app (100 KiB): a few of the CLI's own tool-result lines go over it. */
const TRANSCRIPT_MAX_MB = '0.1'
const TRANSCRIPT_MAX_BYTES = 0.1 * MiB

/** The session's raw transcript (GET …/trajectory as NDJSON). */
async function rawTranscript(t: TestApp, id: string): Promise<string> {
  const res = await t.app.handle(
    new Request(`http://localhost/o/acme/p/_/sessions/${id}/trajectory`, {
      headers: { authorization: `Bearer ${t.admin.token}`, accept: 'application/x-ndjson' },
    }),
  )
  expect(res.status).toBe(200)
  return res.text()
}

for (const kind of ISOLATING) {
  describe(`output flood on ${kind}`, () => {
    let t: TestApp
    let url: string
    let priority = 0

    beforeAll(async () => {
      // agentd runs above its sandboxes (they are niced below it): here the test process is agentd,
      // and it is raised so that other load on a shared machine, not the flood, cannot starve it.
      // Sandboxes started from now on keep their distance below it.
      priority = getPriority()
      setPriority(-10)
      t = await securityApp(kind, { AGENTD_TRANSCRIPT_MAX_MB: TRANSCRIPT_MAX_MB })
      url = t.listen()
    }, 60_000)

    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
      setPriority(priority)
    }, 60_000)

    test('one 300 MB line with no newline: /healthz answers throughout and the server never stalls, memory stays flat, the line is cut and the transcript says so', async () => {
      const call = caller(t)
      // Warm the request path so the first health checks do not pay for it.
      expect((await call('GET', '/healthz')).status).toBe(200)
      const id = await startRunning(t, [{ bash: `${FLOOD_PREP} && ${toCliStdout(FLOOD)}` }, { answer: 'flooded' }])
      await quiesce()
      const rssBefore = process.memoryUsage().rss
      let rssPeak = rssBefore
      const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 20)
      const health = watchHealth(url)
      await health.ready
      const loop = watchLoop()
      let view: any
      let stopped: Awaited<ReturnType<typeof health.stop>>
      try {
        view = await turnEnded(t, id)
      } finally {
        // Stopped whatever happened: a poller left running would outlive the test run.
        clearInterval(sampler)
        stopped = await health.stop()
      }
      const loopStats = loop.stop()
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss)

      console.log(`300 MB line on ${kind}: memory grew ${((rssPeak - rssBefore) / MiB).toFixed(0)} MiB at its peak`)
      // The line never sat in memory: 300 MB went by, far less than that stayed.
      expect(rssPeak - rssBefore).toBeLessThan(150 * MiB)

      const messages = await call('GET', `/o/acme/p/_/sessions/${view.execution_id}/messages`)
      expect(messages.status).toBe(200)
      const events: any[] = messages.body.events
      // The flood was cut, and the transcript says how long each cut line was. A line the CLI
      // prints while the flood runs (progress of a long tool call) ends the flood's line there and
      // a new one starts after it, so there may be several; between them they hold the flood,
      // but for pieces too short to be cut.
      const cuts = events.filter(
        (e) => e.type === 'error' && /^agentd: a line of \d+ bytes of the CLI's output was cut to its first 1048576 bytes$/.test(e.content),
      )
      expect(cuts.length).toBeGreaterThanOrEqual(1)
      const cutBytes = cuts.reduce((sum, e) => sum + Number(/a line of (\d+) bytes/.exec(e.content)![1]), 0)
      console.log(`300 MB line on ${kind}: ${cuts.length} cut line(s) holding ${(cutBytes / MiB).toFixed(1)} MiB, status ${view.status}`)
      expect(cutBytes).toBeGreaterThan(FLOOD_BYTES - 16 * MiB)
      // The raw transcript lost bytes: capture is partial, and nothing in it is over a MiB.
      expect(view.session_capture).toBe('partial')
      const raw = await rawTranscript(t, view.execution_id)
      expect(Math.max(...raw.split('\n').map((line) => line.length))).toBeLessThanOrEqual(MiB)

      if (kind === 'bwrap') {
        // The flood went down the CLI's own socket, in order: it swallowed the CLI's next line
        // (its tool result, appended to the unterminated flood) and nothing else, so the model's
        // answer and the CLI's result line came through and the turn completed.
        expect(view.status).toBe('completed')
        expect(view.error).toBeNull()
        expect(events.some((e) => e.type === 'message' && e.role === 'assistant' && e.content === 'flooded')).toBe(true)
      } else {
        // On gVisor the flood was appended to the CLI's output file, while the CLI goes on writing
        // at its own offset, over the flood's start, where the tail may already have read: its
        // last lines may be lost, and the turn then fails for want of the CLI's result line.
        // Either way it ends, and never as running.
        expect(['completed', 'failed']).toContain(view.status)
      }

      // The server answered all along, and its thread never stalled (BUSY_BOUND_MS).
      expectResponsive(`300 MB line on ${kind}`, stopped, loopStats)
    }, 120_000)

    test('a flood of short lines: /healthz answers throughout and the server never stalls while each line is parsed, and only the first ones are stored', async () => {
      // ~330,000 lines of 31 bytes: the cost is per line (parse, store), not per byte.
      const line = '{"type":"system","subtype":"x"}'
      const id = await startRunning(t, [{ bash: toCliStdout(`yes '${line}' | head -c ${10_000_000}`) }, { answer: 'lines' }])
      await quiesce()
      const health = watchHealth(url)
      await health.ready
      const loop = watchLoop()
      let view: any
      let stopped: Awaited<ReturnType<typeof health.stop>>
      try {
        view = await turnEnded(t, id)
      } finally {
        stopped = await health.stop()
      }
      const loopStats = loop.stop()
      expect(['completed', 'failed']).toContain(view.status)
      if (kind === 'bwrap') expect(view.status).toBe('completed')
      expect(view.session_capture).toBe('partial')
      const trajectory = await caller(t)('GET', `/o/acme/p/_/sessions/${view.execution_id}/trajectory`)
      expect(trajectory.body.bytes).toBeLessThanOrEqual(TRANSCRIPT_MAX_BYTES)
      expect(await rawTranscript(t, view.execution_id)).toContain(`${line}\n${line}\n`)

      expectResponsive(`short-line flood on ${kind}`, stopped, loopStats)
    }, 120_000)

    test(`output over AGENTD_TRANSCRIPT_MAX_MB=${TRANSCRIPT_MAX_MB}: raw lines stop at the cap, events are still parsed, capture is partial`, async () => {
      // Each tool result is one stdout line of ~40 KB (the CLI prints the output twice in it).
      const output = 'b'.repeat(20_000)
      const steps = [1, 2, 3, 4].map(() => ({ bash: `head -c ${output.length} /dev/zero | tr '\\0' b` }))
      const view = await runSession(t, [...steps, { answer: 'after the flood' }])
      expect(view.status).toBe('completed')
      expect(view.error).toBeNull()
      expect(view.session_capture).toBe('partial')

      const call = caller(t)
      const messages = await call('GET', `/o/acme/p/_/sessions/${view.execution_id}/messages`)
      expect(messages.status).toBe(200)
      // Every line was parsed, those past the cap too, and so was what the CLI printed after them.
      const results = messages.body.events.filter((e: any) => e.type === 'tool_result' && e.output === output)
      expect(results).toHaveLength(steps.length)
      expect(messages.body.events.some((e: any) => e.type === 'message' && e.role === 'assistant' && e.content === 'after the flood')).toBe(
        true,
      )

      const trajectory = await call('GET', `/o/acme/p/_/sessions/${view.execution_id}/trajectory`)
      expect(trajectory.status).toBe(200)
      expect(trajectory.body.bytes).toBeLessThanOrEqual(TRANSCRIPT_MAX_BYTES)
      // What was stored is a prefix of the stream: it stops before the CLI's last lines.
      const raw = await rawTranscript(t, view.execution_id)
      expect(raw.startsWith('{')).toBe(true)
      expect(raw).not.toContain('"type":"result"')
    }, 120_000)
  })
}
