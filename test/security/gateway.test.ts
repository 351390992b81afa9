/**
 * The model gateway as a hostile sandbox meets it (CONTRACT section 7): its key serves its own
 * session's current turn only, only the catalog models of the session's harness, each metered at
 * its own price, and the plan's token limit and spend cap hold in the middle of a turn. Real sessions of the
 * Claude Code CLI on gVisor and on bwrap; the attacks run from inside the sandbox with node's
 * fetch against the URL the CLI is configured with, and from the host.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { TestApp } from '../helpers/app'
import { json, req, waitFor } from '../helpers/http'
import { caller, ISOLATING, runSession, script, securityApp, turnEnded } from './helpers'
import { settled } from '../helpers/sessions'

/**
 * Run inside the sandbox: `node probe.mjs <out> <label>:<model>[:<key file>] …` asks the gateway
 * for each model with the CLI's own key (or the one in the file) and stores every status and body
 * as the artifact `<out>`.
 */
const PROBE = `
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
const [out, ...asks] = process.argv.slice(2)
const result = {}
for (const ask of asks) {
  const [label, model, keyFile] = ask.split(':')
  const key = keyFile ? readFileSync(keyFile, 'utf8').trim() : process.env.ANTHROPIC_API_KEY
  const res = await fetch(process.env.ANTHROPIC_BASE_URL + '/v1/messages', {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content: 'hello from the probe' }] }),
  })
  result[label] = { status: res.status, body: await res.text() }
}
mkdirSync('/workspace/.agentd/artifacts', { recursive: true })
writeFileSync('/workspace/.agentd/artifacts/' + out, JSON.stringify(result))
`

/** A Messages request from the host with `key`, for `model`. */
function hostAsk(t: TestApp, key: string, model: string) {
  return fetch(`${t.gateway.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content: 'hello from the host' }] }),
  })
}

async function artifact(t: TestApp, id: string, name: string): Promise<string> {
  const res = await t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}/artifacts/${name}`, { token: t.admin.token }))
  expect(res.status).toBe(200)
  return res.text()
}

for (const kind of ISOLATING) {
  describe(`gateway on ${kind}`, () => {
    let t: TestApp
    beforeAll(async () => {
      t = await securityApp(kind)
    }, 60_000)
    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
    }, 60_000)

    test("another model is 403 naming it, a harness model is served at its own price, and an ended turn's key is 401", async () => {
      // Turn 1, from inside: the session's own model, a model of another harness, an unknown
      // model, and a priced model of this harness (claude-opus-4-8, $5/M input).
      const first = await runSession(t, [
        { write: { path: 'probe.mjs', content: PROBE } },
        {
          bash:
            'node probe.mjs turn1.json own:scripted other:gpt-5.5 unknown:no-such-model opus:claude-opus-4-8 && ' +
            'printf %s "$ANTHROPIC_API_KEY" > /workspace/turn1.key && cp /workspace/turn1.key /workspace/.agentd/artifacts/turn1.key',
        },
        { answer: 'probed' },
      ])
      expect(first.status).toBe('completed')
      const inside = JSON.parse(await artifact(t, first.execution_id, 'turn1.json'))
      expect(inside.own.status).toBe(200)
      expect(inside.other.status).toBe(403)
      expect(JSON.parse(inside.other.body).error.message).toContain('"gpt-5.5"')
      expect(inside.unknown.status).toBe(403)
      expect(JSON.parse(inside.unknown.body).error.message).toContain('"no-such-model"')
      expect(inside.opus.status).toBe(200)
      // The session's model is free; only the opus call costs, so a cost proves it was priced as opus.
      const opusTokens = JSON.parse(inside.opus.body).usage
      const opusCost = (opusTokens.input_tokens * 5 + opusTokens.output_tokens * 25) / 1e6
      expect(first.total_cost_usd).toBeCloseTo(opusCost, 9)
      expect(opusCost).toBeGreaterThan(0)

      // From the host, the ended turn's key is refused for every model.
      const oldKey = (await artifact(t, first.execution_id, 'turn1.key')).trim()
      expect(oldKey).toStartWith('gw_')
      for (const model of ['scripted', 'claude-opus-4-8']) {
        const res = await hostAsk(t, oldKey, model)
        expect(res.status).toBe(401)
        expect((await json(res)).error.type).toBe('authentication_error')
      }

      // Turn 2, from inside the same sandbox: the old key is 401, the new one works; the new one
      // is printed so the host can try it while the turn stalls.
      const id = first.execution_id
      const sent = await caller(t)('POST', `/o/acme/p/_/sessions/${id}/messages`, {
        content: script([
          { bash: 'node probe.mjs turn2.json old:scripted:/workspace/turn1.key own:scripted && printf "LIVE=%s\\n" "$ANTHROPIC_API_KEY"' },
          { sleep: 120_000 },
          { answer: 'never reached' },
        ]),
      })
      expect(sent.status).toBe(200)
      const liveKey = await waitFor(
        async () => {
          const res = await t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}/messages`, { token: t.admin.token }))
          return /LIVE=(gw_[A-Za-z0-9_-]+)/.exec(await res.text())?.[1] ?? null
        },
        (key) => key !== null,
        60_000,
      )
      // From the host with the live key: its own model is served, another is 403 naming it.
      expect((await hostAsk(t, liveKey!, 'scripted')).status).toBe(200)
      const other = await hostAsk(t, liveKey!, 'gemini-3.1-pro-preview')
      expect(other.status).toBe(403)
      expect((await json(other)).error.message).toContain('"gemini-3.1-pro-preview"')

      const stopped = await caller(t)('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'stop_turn' })
      expect(stopped.status).toBe(200)
      await turnEnded(t, id, 2)
      const second = JSON.parse(await artifact(t, id, 'turn2.json'))
      expect(second.old.status).toBe(401)
      expect(second.own.status).toBe(200)
      // The stopped turn's key died with it.
      expect((await hostAsk(t, liveKey!, 'scripted')).status).toBe(401)
    }, 120_000)

    test("the plan's token limit holds mid-turn: the call past it is refused and the turn fails naming the limit", async () => {
      // An org of its own, so the limit touches no other test.
      t.identity.createOrg('capped')
      const admin = t.identity.createUser('capped', 'admin@capped.test', 'admin')
      t.plans.setPlan('capped', { tokenLimit: 1_000_000 })
      const call = async (method: string, path: string, body?: unknown) => {
        const res = await t.app.handle(req(method, `/o/capped/p/_/sessions${path}`, { token: admin.token, body }))
        return { status: res.status, body: await json(res) }
      }
      // The first call reports 2 tokens, the second 2,000,001: it crosses the limit. The third
      // call (which would run `echo three`) must never be served.
      const created = await call('POST', '', {
        agent: 'harness_1',
        prompt: script([
          { usage: { input: 1, output: 1 } },
          { bash: 'echo one' },
          { usage: { input: 2_000_000, output: 1 } },
          { bash: 'echo two' },
          { bash: 'echo three > /workspace/three.txt' },
          { answer: 'past the limit' },
        ]),
      })
      expect(created.status).toBe(202)
      const id = created.body.execution_id
      const ended = { body: await settled(async () => (await call('GET', `/${id}`)).body, { turns: 1, timeoutMs: 60_000 }) }
      expect(ended.body.status).toBe('failed')
      expect(ended.body.error).toContain('TOKEN_LIMIT_REACHED')
      expect(ended.body.error).toContain('1000000 tokens')
      expect(ended.body.total_tokens).toBeGreaterThanOrEqual(2_000_001)
      const calls = await call('GET', `/${id}/tool-calls`)
      const inputs = calls.body.tool_calls.map((c: { input: string }) => c.input).join('\n')
      expect(inputs).toContain('echo two')
      expect(inputs).not.toContain('echo three')
      // And the next turn is refused up front, as before.
      const next = await call('POST', `/${id}/messages`, { content: 'again' })
      expect(next.status).toBe(402)
      expect(next.body.code).toBe('TOKEN_LIMIT_REACHED')
    }, 90_000)

    test("the plan's spend cap holds mid-turn, counted at the price of the model actually called", async () => {
      t.identity.createOrg('spender')
      const admin = t.identity.createUser('spender', 'admin@spender.test', 'admin')
      // The session's model is free; one call of claude-opus-4-8 ($5/M in, $25/M out) from inside
      // the sandbox costs a few hundredths of a cent, past this cap.
      t.plans.setPlan('spender', { spendCapUsd: 0.0001 })
      const call = async (method: string, path: string, body?: unknown) => {
        const res = await t.app.handle(req(method, `/o/spender/p/_/sessions${path}`, { token: admin.token, body }))
        return { status: res.status, body: await json(res) }
      }
      const created = await call('POST', '', {
        agent: 'harness_1',
        prompt: script([
          { write: { path: 'probe.mjs', content: PROBE } },
          { bash: 'node probe.mjs spend.json first:claude-opus-4-8 second:claude-opus-4-8 free:scripted' },
          { answer: 'past the cap' },
        ]),
      })
      expect(created.status).toBe(202)
      const id = created.body.execution_id
      const ended = { body: await settled(async () => (await call('GET', `/${id}`)).body, { turns: 1, timeoutMs: 60_000 }) }
      expect(ended.body.status).toBe('failed')
      expect(ended.body.error).toContain('SPEND_CAP_REACHED')
      expect(ended.body.total_cost_usd).toBeGreaterThan(0.0001)
      const download = await t.app.handle(req('GET', `/o/spender/p/_/sessions/${id}/artifacts/spend.json`, { token: admin.token }))
      expect(download.status).toBe(200)
      const probe = JSON.parse(await download.text())
      // The call that crossed the cap was served; every call after it is refused, free ones too.
      expect(probe.first.status).toBe(200)
      for (const refused of [probe.second, probe.free]) {
        expect(refused.status).toBe(402)
        expect(JSON.parse(refused.body).error.message).toContain('SPEND_CAP_REACHED')
      }
    }, 90_000)
  })
}
