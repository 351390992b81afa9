/**
 * Attack: read a tenant's secrets from the host's process table. Any host user can read every
 * process's /proc/<pid>/cmdline, so a turn's gateway token and its prompt must never be in the argv
 * of any host process: not bwrap's (`--setenv`), not `runsc exec`'s (`--env`, the command), not the
 * CLI's own (on bwrap the CLI is a host process too). A real Claude Code session on gVisor and on
 * bwrap holds its turn open (a bash step waits for a file) while the test scans every process.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { TestApp } from '../helpers/app'
import { caller, ISOLATING, processTable, script, securityApp, turnEnded } from './helpers'
import { poll } from '../helpers/poll'

/** The files under DATA_DIR/sandboxes/<each>/<sub>, as host paths. */
function sandboxFiles(t: TestApp, sub: string): string[] {
  const root = join(t.dir, 'sandboxes')
  if (!existsSync(root)) return []
  return readdirSync(root).flatMap((id) => {
    const dir = join(root, id, sub)
    try {
      return readdirSync(dir).map((name) => join(dir, name))
    } catch {
      return []
    }
  })
}

for (const kind of ISOLATING) {
  describe(`secrets in host argv on ${kind}`, () => {
    let t: TestApp
    beforeAll(async () => {
      t = await securityApp(kind)
    })
    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
    })

    test("neither the turn's gateway token nor its prompt is in any host process's argv (or a host process's environment)", async () => {
      const marker = `prompt-marker-${crypto.randomUUID()}`
      // The step hands the test its own token, then holds the turn until the test says go.
      const steps = [
        { bash: 'printf %s "$ANTHROPIC_API_KEY" > /workspace/token; while [ ! -f /workspace/go ]; do sleep 0.1; done; echo released' },
        { answer: 'done' },
      ]
      const created = await caller(t)('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: `${marker}\n${script(steps)}` })
      expect(created.status).toBeLessThan(300)
      const tokenFile = await poll(
        'the token file',
        () => sandboxFiles(t, 'workspace').find((path) => path.endsWith('/token') && readFileSync(path, 'utf8').length > 0),
        { timeoutMs: 60_000, everyMs: 50 },
      )
      const token = readFileSync(tokenFile, 'utf8')
      expect(token.length).toBeGreaterThanOrEqual(16)

      const table = processTable()
      // The scan sees the turn: the CLI (bwrap) or its runsc exec client (gVisor) is in it.
      expect(table.some((p) => p.cmdline.includes(kind === 'bwrap' ? 'claude' : 'runsc'))).toBe(true)
      for (const { pid, cmdline, environ } of table) {
        expect(cmdline.includes(token), `token in argv of ${pid}: ${cmdline.replaceAll('\0', ' ').slice(0, 300)}`).toBe(false)
        expect(cmdline.includes(marker), `prompt in argv of ${pid}: ${cmdline.replaceAll('\0', ' ').slice(0, 300)}`).toBe(false)
        expect(
          environ.includes(token),
          `token in the environment of host process ${pid}: ${cmdline.replaceAll('\0', ' ').slice(0, 200)}`,
        ).toBe(false)
      }
      // What carried them is gone from the host's disk once the process started: the exec's options
      // (bwrap) or process file (gVisor), and the prompt file in the sandbox's home.
      expect(sandboxFiles(t, 'sandbox/exec')).toEqual([])
      expect(sandboxFiles(t, 'home/.agentd')).toEqual([])

      writeFileSync(join(tokenFile, '..', 'go'), '')
      const ended = await turnEnded(t, created.body.execution_id, 1, 60_000)
      expect(ended.status).toBe('completed')
      // The CLI read the prompt from stdin: the scripted model ran the script it carried.
      const messages = await caller(t)('GET', `/o/acme/p/_/sessions/${created.body.execution_id}/messages`)
      expect(JSON.stringify(messages.body)).toContain('released')
    }, 120_000)
  })
}
