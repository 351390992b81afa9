import { expect, test } from 'bun:test'
import { makeTestApp } from '../helpers/app'
import { req, script, waitFor } from '../helpers/http'

/**
 * A turn being handed over at a graceful stop gets a 503 with Retry-After for each new model
 * request (Gateway.quiesce): every CLI must take it as "try again", not fail the turn, so that the
 * request goes out again after the restart. (Codex's config asks for its retries: with none, it
 * failed the turn on the first 503.)
 */
test("each CLI retries the gateway's 503 and its turn goes on waiting", async () => {
  await using t = await makeTestApp({ AGENTD_SANDBOX: 'bwrap' })
  const call = async (method: string, path: string, body?: unknown): Promise<any> =>
    (await t.app.handle(req(method, path, { token: t.admin.token, body }))).json()
  const logs = async (id: string) => String((await call('GET', `/o/acme/p/_/sessions/${id}/logs`)).logs ?? '')
  const lines = (text: string, pattern: RegExp) => text.split('\n').filter((line) => pattern.test(line)).length
  await Promise.all(
    (['harness_1', 'harness_2', 'harness_3'] as const).map(async (agent) => {
      const id = (
        await call('POST', '/o/acme/p/_/sessions', { agent, prompt: script([{ sleep: 300 }, { bash: 'echo hi' }, { answer: 'never' }]) })
      ).execution_id as string
      // The first request is under way (its reply held 300 ms): from now on the session's requests are 503.
      await waitFor(
        () => logs(id),
        (text) => lines(text, / gateway: POST \S+$/) >= 1,
        60_000,
      )
      void t.gateway.quiesce(id, Date.now() + 120_000)
      const text = await waitFor(
        () => logs(id),
        (text) => lines(text, /answered 503/) >= 2,
        60_000,
      )
      expect(lines(text, /answered 503/), text).toBeGreaterThanOrEqual(2)
      expect((await call('GET', `/o/acme/p/_/sessions/${id}`)).status, `${agent}: ${text}`).toBe('running')
      await call('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'cancelled' })
    }),
  )
}, 120_000)
