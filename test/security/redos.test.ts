/**
 * ReDoS through `output_schema` (CONTRACT section 7): a caller's `pattern` is matched on a
 * linear-time engine, so a catastrophic-backtracking pattern against a crafted answer leaves the
 * server answering. agentd checks answers in two places on its thread: in the gateway, while
 * Codex asks for `text.format` (a real session), and at the end of a turn (turn-patch, tested in
 * a child process: Claude Code checks the object inside its sandbox and hands back none that
 * fails). A pattern the engine cannot run is refused at create, naming it.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { getPriority, setPriority } from 'node:os'
import type { TestApp } from '../helpers/app'
import { json, waitFor } from '../helpers/http'
import { caller, expectResponsive, ISOLATING, quiesce, runSession, script, securityApp, turnEnded, watchHealth, watchLoop } from './helpers'

/** Backtracking engines need about 2^40 steps (or, in JavaScriptCore, a second and more) to reject CRAFTED against EVIL. */
const EVIL = '^(a+)+$'
const CRAFTED = `${'a'.repeat(40)}!`
const schemaWith = (pattern: string) => ({
  type: 'object',
  properties: { s: { type: 'string', pattern } },
  required: ['s'],
  additionalProperties: false,
})

test('the end-of-turn check itself rejects the crafted answer (in a child process, so a backtracking engine fails the test instead of hanging it)', async () => {
  const code = `
    import { compileOutputSchema } from ${JSON.stringify(`${import.meta.dir}/../../src/catalog/output-schema.ts`)}
    const valid = compileOutputSchema(${JSON.stringify(schemaWith(EVIL))})
    const crafted = Array.from({ length: 100 }, (_, i) => valid({ s: ${JSON.stringify(CRAFTED)} + i }))
    process.stdout.write(JSON.stringify([crafted.every((ok) => ok === false), valid({ s: 'aaaa' })]))
  `
  // 100 checks take milliseconds in linear time. A backtracking engine takes over a second for
  // each (JavaScriptCore gives up after its step budget; V8 would take hours), so 30 s only trips on one.
  const child = Bun.spawn([process.execPath, '-e', code], { stdout: 'pipe', stderr: 'inherit', timeout: 30_000 })
  const out = await new Response(child.stdout).text()
  expect(await child.exited).toBe(0)
  expect(JSON.parse(out)).toEqual([true, true])
}, 60_000)

/** Sets this process's niceness; only root may raise it, and without root the measurement runs as is. */
function raise(niceness: number): void {
  try {
    setPriority(niceness)
  } catch {
    // EACCES: not root.
  }
}

for (const kind of ISOLATING) {
  describe(`output_schema patterns on ${kind}`, () => {
    let t: TestApp
    beforeAll(async () => {
      t = await securityApp(kind)
    }, 60_000)
    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
    }, 60_000)

    test('a backtracking pattern against a crafted answer: the turn ends as a mismatch', async () => {
      // Codex asks for text.format, and agentd's gateway checks the reply against the schema on
      // the server's thread: the mismatch fails the turn, as a provider's refusal would. (Claude
      // Code checks the object inside its sandbox; agentd sees none that fails.)
      const codex = await runSession(t, [{ structured: { s: CRAFTED } }], { agent: 'harness_2', output_schema: schemaWith(EVIL) })
      expect(codex.status).toBe('failed')
      expect(codex.error).toContain(`must match pattern "${EVIL}"`)
    }, 90_000)

    test("a sandbox's key sending the gateway such schemas and answers: /healthz answers throughout and the server never stalls", async () => {
      // A turn holds its key open while it stalls; the key reaches the host through the tool output.
      const call = caller(t)
      const created = await call('POST', '/o/acme/p/_/sessions', {
        agent: 'harness_1',
        prompt: script([{ bash: 'printf "LIVE=%s\\n" "$ANTHROPIC_API_KEY"' }, { sleep: 120_000 }, { answer: 'never reached' }]),
      })
      expect(created.status).toBe(202)
      const id = created.body.execution_id
      const key = await waitFor(
        async () =>
          /LIVE=(gw_[A-Za-z0-9_-]+)/.exec(JSON.stringify((await call('GET', `/o/acme/p/_/sessions/${id}/messages`)).body))?.[1] ?? null,
        (found) => found !== null,
        60_000,
      )
      // The OpenAI Responses request Codex would send, with the evil schema as text.format and a
      // script whose answer is the crafted string: the gateway checks one against the other.
      const attack = () =>
        fetch(`${t.gateway.url}/v1/responses`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'scripted',
            input: script([{ structured: { s: CRAFTED } }]),
            text: { format: { type: 'json_schema', name: 'evil', schema: schemaWith(EVIL) } },
          }),
        })

      // The first request compiles the schema (code generation, paid once per schema); the ones
      // measured only check answers against it.
      expect((await attack()).status).toBe(400)
      // Measured while only the attack runs (the sandbox sits in its stall): a backtracking engine
      // holds the thread for a second and more per request (hours on V8), linear time for microseconds.
      const url = t.listen()
      expect((await fetch(`${url}/healthz`)).status).toBe(200)
      // agentd outranks everything else on its host (sandboxes run niced below it); here this
      // process is agentd, raised for the measurement so other work on a shared test machine
      // cannot pass for a stall of the server.
      const priority = getPriority()
      raise(-10)
      await quiesce()
      const health = watchHealth(url)
      await health.ready
      const loop = watchLoop()
      try {
        // At least 20 attacks, and for at least a second, so the poller sees the whole window.
        const started = Date.now()
        for (let i = 0; i < 20 || Date.now() - started < 1000; i++) {
          const res = await attack()
          expect(res.status).toBe(400)
          expect((await json(res)).error.message).toContain(`must match pattern "${EVIL}"`)
        }
      } finally {
        const stopped = await health.stop()
        raise(priority)
        expectResponsive(`ReDoS via the gateway on ${kind}`, stopped, loop.stop())
      }
      expect((await call('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'stop_turn' })).status).toBe(200)
      await turnEnded(t, id, 1)
    }, 90_000)

    test('a pattern the linear-time engine cannot run (backreference, lookaround) is 400 at create, naming it', async () => {
      const call = caller(t)
      for (const pattern of ['^(a)\\1$', '^(?=a)a$', '(?<!b)a']) {
        const res = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: 'hi', output_schema: schemaWith(pattern) })
        expect(res.status).toBe(400)
        expect(res.body.code).toBe('OUTPUT_SCHEMA_INVALID')
        expect(res.body.error).toContain(JSON.stringify(pattern))
      }
      // The same in patternProperties, which ajv compiles with the same engine.
      const res = await call('POST', '/o/acme/p/_/sessions', {
        agent: 'harness_2',
        prompt: 'hi',
        output_schema: {
          type: 'object',
          properties: {},
          required: [],
          patternProperties: { '^(x)\\1': { type: 'string' } },
          additionalProperties: false,
        },
      })
      expect(res.status).toBe(400)
      expect(res.body.error).toContain(JSON.stringify('^(x)\\1'))
    }, 30_000)
  })
}
