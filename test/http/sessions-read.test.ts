import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'
import { settled } from '../helpers/sessions'

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
  t.plans.setPlan('acme', { maxConcurrent: 20 })
  t.identity.createProject('acme', 'api', null)
})
afterAll(() => t[Symbol.asyncDispose]())

const get = (path: string, token = t.admin.token) => t.app.handle(req('GET', path, { token }))
/** Codex unless a test names a harness: the reads are the same for each, and Codex starts fastest. */
const create = async (body: Record<string, unknown>, project = '_') =>
  json(await t.app.handle(req('POST', `/o/acme/p/${project}/sessions`, { token: t.admin.token, body: { agent: 'harness_2', ...body } })))
const sleeping = script([{ sleep: 60_000 }])
const settledRun = (id: string) => settled(() => get(`/o/acme/p/_/sessions/${id}`).then(json))

describe('GET one session', () => {
  test('by `_`, by the Project handle and by the Project id; another handle is 404', async () => {
    const session = await create({ prompt: sleeping }, 'web')
    for (const ref of ['_', 'web', t.project.id]) {
      const res = await get(`/o/acme/p/${ref}/sessions/${session.execution_id}`)
      expect(res.status).toBe(200)
      expect((await json(res)).execution_id).toBe(session.execution_id)
    }
    expect((await get(`/o/acme/p/api/sessions/${session.execution_id}`)).status).toBe(404)
    expect((await get(`/o/acme/p/nope/sessions/${session.execution_id}`)).status).toBe(404)
  })

  test('a session of a run without a Project is not found under a Project handle', async () => {
    const session = await create({ prompt: sleeping })
    expect((await get(`/o/acme/p/web/sessions/${session.execution_id}`)).status).toBe(404)
  })

  test('an unknown id is 404 in the error envelope', async () => {
    const res = await get('/o/acme/p/_/sessions/00000000-0000-0000-0000-000000000000')
    expect(res.status).toBe(404)
    expect(typeof (await json(res)).error).toBe('string')
  })
})

describe('GET the Project list', () => {
  test('newest first, filtered by status, limited; `_` lists the whole org', async () => {
    const a = await create({ prompt: sleeping }, 'api')
    const b = await create({ prompt: sleeping }, 'api')
    const list = await json(await get('/o/acme/p/api/sessions'))
    expect(list.executions.map((s: { execution_id: string }) => s.execution_id)).toEqual([b.execution_id, a.execution_id])
    expect((await json(await get('/o/acme/p/api/sessions?limit=1'))).executions).toHaveLength(1)
    const all = await json(await get('/o/acme/p/_/sessions?limit=100'))
    expect(all.executions.map((s: { execution_id: string }) => s.execution_id)).toContain(a.execution_id)
    expect(all.executions.length).toBeGreaterThan(2)
    const running = await json(await get('/o/acme/p/api/sessions?status=completed'))
    expect(running.executions).toEqual([])
  })

  test('400 for a bad status or limit, 404 for an unknown Project', async () => {
    expect((await get('/o/acme/p/_/sessions?status=sleeping')).status).toBe(400)
    expect((await get('/o/acme/p/_/sessions?limit=0')).status).toBe(400)
    expect((await get('/o/acme/p/_/sessions?limit=101')).status).toBe(400)
    expect((await get('/o/acme/p/nope/sessions')).status).toBe(404)
  })
})

describe('PATCH cancel', () => {
  test('cancels a running turn: 200, status cancelled, the CLI process is gone; a second cancel is 409', async () => {
    const session = await create({ prompt: sleeping })
    const id = session.execution_id
    await waitFor(
      () => get(`/o/acme/p/_/sessions/${id}`).then(json),
      (s) => s.status === 'running',
    )
    // Wait until the CLI is really in its turn (it has written its init line).
    await waitFor(async () => t.store.allEvents(id).some((e) => e.type === 'init'), Boolean)
    const patch = (body: unknown) => t.app.handle(req('PATCH', `/o/acme/p/_/sessions/${id}`, { token: t.admin.token, body }))
    const res = await patch({ status: 'cancelled' })
    expect(res.status).toBe(200)
    expect(await json(res)).toEqual({ ok: true, status: 'cancelled' })
    const after = await json(await get(`/o/acme/p/_/sessions/${id}`))
    expect(after.status).toBe('cancelled')
    expect(after.machine_state).toBe('stopped')
    const again = await patch({ status: 'cancelled' })
    expect(again.status).toBe(409)
    expect(typeof (await json(again)).error).toBe('string')
    const result = await json(await get(`/o/acme/p/_/sessions/${id}/result`))
    expect(result.status).toBe('cancelled')
    expect(result.result).toBeNull()
  })

  test('a finished session cannot be cancelled (409)', async () => {
    const session = await create({ prompt: 'just answer' })
    expect((await settledRun(session.execution_id)).status).toBe('completed')
    const res = await t.app.handle(
      req('PATCH', `/o/acme/p/_/sessions/${session.execution_id}`, { token: t.admin.token, body: { status: 'cancelled' } }),
    )
    expect(res.status).toBe(409)
  })

  test('400 for another field, a missing or unknown status', async () => {
    const session = await create({ prompt: sleeping })
    const patch = (body: unknown) =>
      t.app.handle(req('PATCH', `/o/acme/p/_/sessions/${session.execution_id}`, { token: t.admin.token, body }))
    expect((await patch({})).status).toBe(400)
    expect((await patch({ status: 'done' })).status).toBe(400)
    expect((await patch({ status: 'cancelled', reason: 'x' })).status).toBe(400)
    expect((await patch('not json')).status).toBe(400)
  })
})

describe('GET result', () => {
  test('null result and no output while running; the answer and a one-line output after', async () => {
    const session = await create({ prompt: script([{ sleep: 700 }, { answer: 'all good' }]) })
    const early = await json(await get(`/o/acme/p/_/sessions/${session.execution_id}/result`))
    expect(early.execution_id).toBe(session.execution_id)
    expect(early.result).toBeNull()
    expect(early.completed_at).toBeNull()
    await settledRun(session.execution_id)
    const result = await json(await get(`/o/acme/p/_/sessions/${session.execution_id}/result`))
    expect(result).toMatchObject({
      status: 'completed',
      output: 'completed in 1 turn',
      result: { text: 'all good', structured: null, schema_valid: null },
    })
    expect(result.completed_at).toMatch(/^\d{4}-/)
  })

  test('Done: <first line> without a script; title is the first line and summary the last text line', async () => {
    const session = await create({ prompt: 'Say hello to the team\nand more' })
    const done = await settledRun(session.execution_id)
    expect(done.summary).toBe('Done: Say hello to the team')
    expect(t.store.get(session.execution_id)!.title).toBe('Say hello to the team')
  })
})
