import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { HARNESSES } from '../../src/domain/harness'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'
import { settled } from '../helpers/sessions'

/**
 * Forks on a real isolating driver (contract section 13), for each harness: the fork's follow-up
 * sees its source's files and continues the CLI's conversation (the scripted model is sent the
 * source's prompt, `recall`), writes in either never show in the other, and a fork of a fork
 * goes on likewise. Run by forks-gvisor.test.ts and forks-bwrap.test.ts.
 */
export function forkTests(driver: 'gvisor' | 'bwrap'): void {
  describe(`forks on ${driver}`, () => {
    let t: TestApp
    beforeAll(async () => {
      t = await makeTestApp({ AGENTD_SANDBOX: driver })
      t.plans.setPlan('acme', { maxConcurrent: 50 })
    })
    afterAll(() => t[Symbol.asyncDispose]())

    const path = (id: string, rest = '') => `/o/acme/p/_/sessions/${id}${rest}`
    const call = (method: string, url: string, body?: unknown) => t.app.handle(req(method, url, { token: t.admin.token, body }))
    const get = async (id: string) => json(await call('GET', path(id)))
    /** What went wrong in a turn that did not end as it should: its log's tail. */
    const explain = async (id: string) => String((await json(await call('GET', path(id, '/logs')))).logs ?? '').slice(-2500)
    const done = (id: string, turns: number) => settled(() => get(id), { turns, timeoutMs: 90_000, explain: () => explain(id) })
    /** The output of the shell calls of a session's turn, as its transcript holds them. */
    const shellOutput = (id: string, turn: number) =>
      t.store
        .allEvents(id)
        .filter((e) => e.turn === turn && e.type === 'tool_result')
        .map((e) => String(e.data.output ?? ''))
        .join('')
    const answer = async (id: string) => (await json(await call('GET', path(id, '/result')))).result?.text
    async function followUp(id: string, content: string, turns: number) {
      expect((await call('POST', path(id, '/messages'), { content })).status).toBe(200)
      const view = await done(id, turns)
      expect(view.status).toBe('completed')
    }
    async function fork(id: string, turn: number) {
      const res = await call('POST', path(id, '/fork'))
      const body = await json(res)
      expect({ status: res.status, body }).toMatchObject({
        status: 202,
        body: { status: 'completed', machine_state: 'paused', turns_count: 0, forked_from: { session: id, turn } },
      })
      return body.execution_id as string
    }

    test('refused: an ephemeral source, a running one (409 NOT_FORKABLE), an unknown one (404); nothing is made', async () => {
      const start = async (body: Record<string, unknown>) =>
        (await json(await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', ...body }))).execution_id as string
      const refused = async (id: string, status: number, code?: string) => {
        const res = await call('POST', path(id, '/fork'))
        expect({ status: res.status, code: (await json(res)).code }).toEqual({ status, code })
      }
      const ephemeral = await start({ prompt: script([{ answer: 'once' }]), persistence: 'ephemeral' })
      const running = await start({ prompt: script([{ bash: 'sleep 30' }, { answer: 'late' }]) })
      await done(ephemeral, 1)
      await refused(ephemeral, 409, 'NOT_FORKABLE')
      await waitFor(
        async () =>
          shellOutput(running, 1) === '' &&
          (await get(running)).status === 'running' &&
          t.store.allEvents(running).some((e) => e.type === 'tool_use'),
        Boolean,
        60_000,
      )
      await refused(running, 409, 'NOT_FORKABLE')
      await refused('no-such-session', 404)
      expect((await json(await call('GET', `/o/acme/sessions?forked_from=${running}`))).sessions).toEqual([])
      expect((await call('PATCH', path(running), { status: 'cancelled' })).status).toBe(200)
    }, 120_000)

    for (const harness of HARNESSES) {
      test(`${harness}: the fork goes on from its source’s files and conversation; neither sees the other’s writes`, async () => {
        const created = await call('POST', '/o/acme/p/_/sessions', {
          agent: harness,
          prompt: `Make notes\n${script([{ bash: 'echo from-source > notes.txt' }, { answer: 'noted' }])}`,
        })
        expect(created.status).toBe(202)
        const source = (await json(created)).execution_id as string
        expect((await done(source, 1)).status).toBe('completed')

        const copy = await fork(source, 1)
        await followUp(
          copy,
          `Go on in the fork\n${script([{ bash: 'cat notes.txt; echo from-fork > notes.txt; echo fork > fork.txt' }, { recall: 'Seen' }])}`,
          1,
        )
        expect(shellOutput(copy, 1)).toContain('from-source')
        // The CLI resumed the source's conversation: the model was sent the source's prompt.
        expect(await answer(copy)).toBe('Seen: Make notes | Go on in the fork')

        await followUp(source, `Go on in the source\n${script([{ bash: 'cat notes.txt; ls; echo src > src.txt' }, { recall: 'Seen' }])}`, 2)
        const seen = shellOutput(source, 2)
        expect(seen).toContain('from-source')
        expect(seen).not.toContain('from-fork')
        expect(seen).not.toContain('fork.txt')
        // The source's conversation has none of the fork's turn.
        expect(await answer(source)).toBe('Seen: Make notes | Go on in the source')

        if (harness !== 'harness_2') return
        // A fork of a fork (Codex only: the copy is the driver's, the same for every CLI).
        const again = await fork(copy, 1)
        await followUp(again, `Once more\n${script([{ bash: 'cat notes.txt; ls' }, { recall: 'Seen' }])}`, 1)
        const third = shellOutput(again, 1)
        expect(third).toContain('from-fork')
        expect(third).not.toContain('src.txt')
        expect(await answer(again)).toBe('Seen: Make notes | Go on in the fork | Once more')
      }, 240_000)
    }
  })
}
