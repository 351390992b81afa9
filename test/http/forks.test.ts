import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'
import { settled } from '../helpers/sessions'

/**
 * Forks through the HTTP API (contract section 13) on the process driver: what the route answers,
 * what it refuses, and that a fork goes on from its source's conversation and files while the
 * two share nothing afterwards. The same on gVisor and bwrap for each harness:
 * test/e2e/forks-*.test.ts.
 */
let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
  t.plans.setPlan('acme', { maxConcurrent: 50 })
})
afterAll(() => t[Symbol.asyncDispose]())

const path = (id: string, rest = '') => `/o/acme/p/_/sessions/${id}${rest}`
const call = (method: string, url: string, body?: unknown, token = t.admin.token) => t.app.handle(req(method, url, { token, body }))
const get = async (id: string) => json(await call('GET', path(id)))
const workspace = (id: string) => join(t.dir, 'sandboxes', id, 'workspace')

async function start(prompt: string, extra: Record<string, unknown> = {}) {
  const res = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt, ...extra })
  expect(res.status).toBe(202)
  return (await json(res)).execution_id as string
}
async function followUp(id: string, content: string, turns: number) {
  const res = await call('POST', path(id, '/messages'), { content })
  expect(res.status).toBe(200)
  return settled(() => get(id), { turns })
}

describe('POST …/sessions/{session}/fork', () => {
  test('a fork rests completed and parked with no turn of its own; its follow-up goes on in a copy of the source’s files', async () => {
    const source = await start(`Make notes\n${script([{ bash: 'echo from-source > notes.txt' }, { answer: 'noted' }])}`)
    const before = await settled(() => get(source), { turns: 1 })
    expect(before.status).toBe('completed')

    const res = await call('POST', path(source, '/fork'))
    expect(res.status).toBe(202)
    const fork = await json(res)
    expect(fork).toMatchObject({
      status: 'completed',
      machine_state: 'paused',
      persistence_mode: 'resumable',
      turns_count: 0,
      forked_from: { session: source, turn: 1 },
      project_id: before.project_id,
      agent: 'harness_2',
      model: before.model,
    })
    expect(fork.execution_id).not.toBe(source)
    expect(await get(fork.execution_id)).toEqual(fork)
    // The source is untouched: not even its updated_at moved.
    expect(await get(source)).toEqual(before)
    expect(before.forked_from).toBeUndefined()
    // Its sandbox is there before the answer: a copy of the source's files.
    expect(readFileSync(join(workspace(fork.execution_id), 'notes.txt'), 'utf8')).toBe('from-source\n')

    const forked = await followUp(
      fork.execution_id,
      `Go on in the fork\n${script([{ bash: 'cat notes.txt > seen.txt; echo from-fork > notes.txt' }, { recall: 'Seen' }])}`,
      1,
    )
    expect(forked.status).toBe('completed')
    expect(forked.turns_count).toBe(1)
    // On the process driver the CLI starts a new conversation in the copied files (its state records
    // host paths: SessionSandboxes.fork); gVisor and bwrap carry the conversation on (test/e2e/forks.ts).
    expect((await json(await call('GET', path(fork.execution_id, '/result')))).result.text).toBe('Seen: Go on in the fork')
    expect(readFileSync(join(workspace(fork.execution_id), 'seen.txt'), 'utf8')).toBe('from-source\n')
    // Writes in the fork never show in the source, nor the source's in the fork.
    expect(readFileSync(join(workspace(source), 'notes.txt'), 'utf8')).toBe('from-source\n')
    await followUp(source, `Go on in the source\n${script([{ bash: 'echo only-source > source.txt' }, { recall: 'Seen' }])}`, 2)
    expect((await json(await call('GET', path(source, '/result')))).result.text).toBe('Seen: Make notes | Go on in the source')
    expect(existsSync(join(workspace(fork.execution_id), 'source.txt'))).toBe(false)
    expect(readFileSync(join(workspace(source), 'notes.txt'), 'utf8')).toBe('from-source\n')

    // A fork of a fork: its source's second turn is where it begins.
    const again = await json(await call('POST', path(fork.execution_id, '/fork')))
    expect(again).toMatchObject({ status: 'completed', turns_count: 0, forked_from: { session: fork.execution_id, turn: 1 } })
    await followUp(again.execution_id, `Once more\n${script([{ bash: 'cat notes.txt > seen.txt' }, { recall: 'Seen' }])}`, 1)
    expect((await json(await call('GET', path(again.execution_id, '/result')))).result.text).toBe('Seen: Once more')
    expect(readFileSync(join(workspace(again.execution_id), 'seen.txt'), 'utf8')).toBe('from-fork\n')
    // The org's search shows the relation, and finds a session's forks.
    const found = await json(await call('GET', `/o/acme/sessions?forked_from=${fork.execution_id}`))
    expect(found.sessions.map((s: { id: string; forked_from: unknown }) => [s.id, s.forked_from])).toEqual([
      [again.execution_id, { session: fork.execution_id, turn: 1 }],
    ])
  }, 120_000)

  test('refused with 409 NOT_FORKABLE unless resumable and parked between turns; 404 for an unknown session', async () => {
    const refused = async (id: string, why: string) => {
      const res = await call('POST', path(id, '/fork'))
      expect(res.status).toBe(409)
      const body = await json(res)
      expect(body.code).toBe('NOT_FORKABLE')
      expect(body.error).toContain(why)
    }
    const ephemeral = await start(script([{ answer: 'done' }]), { persistence: 'ephemeral' })
    await settled(() => get(ephemeral), { turns: 1 })
    await refused(ephemeral, 'ephemeral')

    const long = await start(script([{ sleep: 60_000 }, { answer: 'late' }]))
    await waitFor(
      () => get(long),
      (s) => s.status === 'running',
    )
    await refused(long, 'runs one')
    expect((await call('PATCH', path(long), { status: 'paused' })).status).toBe(202)
    await refused(long, 'paused mid-turn')
    expect((await call('PATCH', path(long), { status: 'cancelled' })).status).toBe(200)
    await refused(long, 'closed')

    const res = await call('POST', path('nope', '/fork'))
    expect(res.status).toBe(404)
    // Nothing was made for any of them.
    for (const id of [ephemeral, long]) {
      const forks = await json(await call('GET', `/o/acme/sessions?forked_from=${id}`))
      expect(forks.sessions).toEqual([])
    }
  }, 60_000)

  test('an Idempotency-Key answers a retried fork with the fork first made; the key with another source is 409', async () => {
    const [a, b] = [await start(script([{ answer: 'a' }])), await start(script([{ answer: 'b' }]))]
    await settled(() => get(a), { turns: 1 })
    await settled(() => get(b), { turns: 1 })
    const fork = (id: string, key: string) =>
      t.app.handle(req('POST', path(id, '/fork'), { token: t.admin.token, headers: { 'idempotency-key': key } }))
    const first = await fork(a, 'fork-once')
    expect(first.status).toBe(202)
    const made = (await json(first)).execution_id as string
    const again = await fork(a, 'fork-once')
    expect({ status: again.status, id: (await json(again)).execution_id }).toEqual({ status: 202, id: made })
    const other = await fork(b, 'fork-once')
    expect({ status: other.status, code: (await json(other)).code }).toEqual({ status: 409, code: 'IDEMPOTENCY_CONFLICT' })
    const forks = await json(await call('GET', `/o/acme/sessions?forked_from=${a}`))
    expect(forks.sessions.map((s: { id: string }) => s.id)).toEqual([made])
  }, 60_000)
})
