import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'
import { settled } from '../helpers/sessions'

/**
 * A CLI started ahead in a warm sandbox (AGENTD_WARM_CLI, issue 35): the CLI of the harness last
 * asked for (Claude Code at first, Gemini CLI after a Gemini create) is loaded in the warm sandbox
 * before any session exists and waits at the gateway for its first message. A plain session of that
 * harness runs its first turn on it, as any turn (events, tool call, answer), and its next turn
 * resumes that CLI's conversation; a session it does not fit (another harness, an effort,
 * attachments) has it ended and starts its own; nothing but the session that took it can get its
 * message.
 */
for (const driver of ['gvisor', 'bwrap'] as const) {
  describe(`a CLI started ahead on ${driver}`, () => {
    let t: TestApp
    beforeAll(async () => {
      // The gateway answers a started CLI's ask after 300 ms instead of a minute: each waits through asks again.
      t = await makeTestApp({ AGENTD_SANDBOX: driver, AGENTD_WARM_SANDBOXES: '1', AGENTD_TIME_SCALE: '0.005' })
      t.plans.setPlan('acme', { maxConcurrent: 10 })
    })
    afterAll(() => t?.[Symbol.asyncDispose](), 120_000)

    const path = (id: string, rest = '') => `/o/acme/p/_/sessions/${id}${rest}`
    const call = (method: string, url: string, body?: unknown) => t.app.handle(req(method, url, { token: t.admin.token, body }))
    const get = async (id: string) => json(await call('GET', path(id)))
    const logs = async (id: string) => String((await json(await call('GET', path(id, '/logs')))).logs ?? '')
    const done = async (id: string, turns: number) =>
      settled(() => get(id), { turns, timeoutMs: 90_000, explain: async () => (await logs(id)).slice(-2000) })
    const outputs = (id: string, turn: number) =>
      t.store
        .allEvents(id)
        .filter((e) => e.turn === turn && e.type === 'tool_result')
        .map((e) => String(e.data.output ?? ''))
        .join('\n')
    const STARTED = 'the turn runs on the CLI started ahead in its sandbox'

    async function startWarm(body: Record<string, unknown>, cli = true): Promise<string> {
      // Booted, with its CLI started before the session exists (and past a few of its asks).
      await waitFor(async () => t.warm.booted === 1 && t.warm.startedClis === (cli ? 1 : 0), Boolean, 90_000)
      await Bun.sleep(1000)
      const res = await call('POST', '/o/acme/p/_/sessions', body)
      expect(res.status).toBe(202)
      return (await json(res)).execution_id as string
    }

    test('a plain Claude Code session runs its first turn on it, as any turn; its next turn resumes that conversation', async () => {
      const id = await startWarm({
        agent: 'harness_1',
        prompt: `Warm start\n${script([{ bash: 'echo from-the-started-cli' }, { answer: 'done' }])}`,
      })
      const view = await done(id, 1)
      expect({ status: view.status, error: view.error }).toEqual({ status: 'completed', error: null })
      expect(await logs(id)).toContain(STARTED)
      expect(outputs(id, 1)).toContain('from-the-started-cli')
      const types = t.store
        .allEvents(id)
        .filter((e) => e.turn === 1 && e.kind === 'harness')
        .map((e) => e.type)
      expect(types).toEqual(['init', 'message', 'tool_use', 'tool_result', 'message', 'usage', 'result'])
      expect((await json(await call('GET', path(id, '/result')))).result.text).toBe('done')
      // The next turn starts its own CLI, which resumes the started one's conversation.
      expect((await call('POST', path(id, '/messages'), { content: `Go on\n${script([{ recall: 'Seen' }])}` })).status).toBe(200)
      await done(id, 2)
      expect((await json(await call('GET', path(id, '/result')))).result.text).toBe('Seen: Warm start | Go on')
    }, 180_000)

    test('attack: from inside a session, the first-message address gives nothing for its own key or a made-up one', async () => {
      const probe =
        'for k in "$ANTHROPIC_API_KEY" gw_started_nope; do ' +
        'curl -s -o /dev/null -w "%{http_code} " -H "authorization: Bearer $k" "$ANTHROPIC_BASE_URL/_agentd/first-message"; done'
      const id = await startWarm({ agent: 'harness_1', prompt: script([{ bash: probe }, { answer: 'probed' }]) })
      expect((await done(id, 1)).status).toBe('completed')
      expect(await logs(id)).toContain(STARTED) // its own key is the started CLI's, served once already
      expect(outputs(id, 1)).toContain('404 404')
    }, 180_000)

    test('after a Gemini create the next CLI started is Gemini CLI, and a plain Gemini session runs its first turn on it', async () => {
      // This one finds Claude Code started, which it does not fit: it starts its own.
      const switched = await startWarm({ agent: 'harness_3', prompt: script([{ answer: 'switched' }]) })
      expect((await done(switched, 1)).status).toBe('completed')
      expect(await logs(switched)).not.toContain(STARTED)
      const prompt = `Warm start\n${script([{ bash: 'echo from-the-started-gemini' }, { answer: 'done' }])}`
      const id = await startWarm({ agent: 'harness_3', prompt })
      const view = await done(id, 1)
      expect({ status: view.status, error: view.error }).toEqual({ status: 'completed', error: null })
      expect(await logs(id)).toContain(STARTED)
      expect(outputs(id, 1)).toContain('from-the-started-gemini')
      const turn1 = t.store.allEvents(id).filter((e) => e.turn === 1 && e.kind === 'harness')
      expect(turn1.map((e) => e.type)).toEqual(['init', 'message', 'tool_use', 'tool_result', 'message', 'usage', 'result'])
      // The prompt as given: without the newline the started CLI's stdin was primed with.
      expect(turn1[1]!.data).toMatchObject({ role: 'user', content: prompt })
      expect((await json(await call('GET', path(id, '/result')))).result.text).toBe('done')
      expect((await call('POST', path(id, '/messages'), { content: `Go on\n${script([{ recall: 'Seen' }])}` })).status).toBe(200)
      await done(id, 2)
      expect((await json(await call('GET', path(id, '/result')))).result.text).toBe('Seen: Warm start | Go on')
    }, 240_000)

    test('a session it does not fit (a Gemini `/` prompt, another harness, an effort, attachments) has it ended and starts its own CLI', async () => {
      const document = {
        type: 'document',
        name: 'CLAUDE.md',
        source: { type: 'base64', media_type: 'text/plain', data: Buffer.from('Answer in French.\n').toString('base64') },
      }
      const bodies = [
        // Gemini CLI waits (the test before asked for it): a prompt that is a `/` command, then Claude Code.
        { agent: 'harness_3', prompt: '/notes for the model' },
        { agent: 'harness_1', prompt: script([{ answer: 'switched back' }]) },
        { agent: 'harness_1', effort: 'high', prompt: script([{ answer: 'high done' }]) },
        { agent: 'harness_1', input: [{ type: 'text', text: script([{ answer: 'read' }]) }, document] },
        // Codex last: after its create no CLI is started ahead (Codex has none).
        { agent: 'harness_2', prompt: script([{ bash: 'echo codex' }, { answer: 'codex done' }]) },
      ]
      for (const body of bodies) {
        const id = await startWarm(body)
        const view = await done(id, 1)
        expect({ status: view.status, error: view.error }).toEqual({ status: 'completed', error: null })
        expect(await logs(id)).not.toContain(STARTED)
        // Only the session's own CLI ran: one init, one answer.
        expect(t.store.allEvents(id).filter((e) => e.type === 'init')).toHaveLength(1)
      }
      await waitFor(
        async () => t.warm.booted,
        (n) => n === 1,
        90_000,
      )
      await Bun.sleep(1500)
      expect(t.warm.startedClis).toBe(0)
    }, 240_000)
  })
}
