/**
 * A session's stored log keeps agentd's own lines whatever the sandbox prints: the CLI's stderr
 * has its 1 MiB, the gateway's request lines (the record of what the turn asked the model) have
 * theirs. A tool run inside the sandbox writes 1.6 MB into the stderr of the processes above it (the
 * CLI among them); the model request after it is still in the log. Real Claude Code sessions on
 * gVisor and on bwrap. (Before, the two shared one cap: on gVisor the flood hid the later requests.)
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'
import { ISOLATING, runSession, securityApp } from './helpers'

/** 1,600 lines of 1,000 bytes into fd 2 of each of the three processes above the tool's shell. */
const FLOOD = `line=$(head -c 1000 /dev/zero | tr '\\0' x); p=$PPID; for i in 1 2 3; do for j in $(seq 1600); do echo "$line"; done > /proc/$p/fd/2 2>/dev/null; p=$(awk '{print $4}' /proc/$p/stat); done; echo flooded`

for (const kind of ISOLATING) {
  describe(`log flood on ${kind}`, () => {
    let t: TestApp
    beforeAll(async () => {
      t = await securityApp(kind)
    })
    afterAll(() => t[Symbol.asyncDispose]())

    test("a flood of the CLI's stderr is cut at its own cap and never hides the gateway's line for a model request", async () => {
      const done = await runSession(t, [{ bash: FLOOD }, { answer: 'after the flood' }])
      expect(done).toMatchObject({ status: 'completed', summary: 'after the flood' })
      const logs = await json(await t.app.handle(req('GET', `/o/acme/p/_/sessions/${done.execution_id}/logs`, { token: t.admin.token })))
      // On gVisor the CLI's stderr is a file the sandbox can append to: the flood reaches it and is
      // cut at the cap. On bwrap it is a socket, which no path inside opens again: it never gets there.
      expect(logs.truncated).toBe(kind === 'gvisor')
      const text = logs.logs as string
      expect(text.length).toBeLessThan(3 * 1024 * 1024)
      // Every model request of the turn is in the log with its answer: the one after the flood too.
      const asked = text.split('\n').filter((line) => / gateway: POST \S+$/.test(line)).length
      const answered = text.split('\n').filter((line) => / gateway: POST \S+ answered 200/.test(line)).length
      expect(asked).toBeGreaterThanOrEqual(2)
      expect(answered).toBe(asked)
    }, 90_000)
  })
}
