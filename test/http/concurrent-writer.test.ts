import { afterAll, beforeAll, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * Another writer on the same database (a second agentd on the file) commits a session's snapshot
 * between this server's read and its write. The optimistic lock catches it; the transition is
 * decided again on the fresh snapshot, and only a session that keeps changing is a 409.
 */
let t: TestApp
let other: Database
beforeAll(async () => {
  t = await makeTestApp()
  other = new Database(t.config.dbPath)
})
afterAll(async () => {
  other.close()
  await t[Symbol.asyncDispose]()
})

const call = (method: string, path: string, body?: unknown) => t.app.handle(req(method, path, { token: t.admin.token, body }))

async function running(): Promise<string> {
  const created = await json(await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: script([{ sleep: 60_000 }]) }))
  await waitFor(
    () => call('GET', `/o/acme/p/_/sessions/${created.execution_id}`).then(json),
    (s) => s.status === 'running',
  )
  return created.execution_id
}

/** The next `times` commits of the store each find the snapshot bumped by the other connection first. */
function interleave(times: number): { attempts: number } {
  const seen = { attempts: 0 }
  const commit = t.store.commit.bind(t.store)
  t.store.commit = (id, ...rest) => {
    seen.attempts++
    if (seen.attempts <= times) other.run('UPDATE session_snapshots SET version = version + 1 WHERE session_id = ?', [id])
    else t.store.commit = commit
    return commit(id, ...rest)
  }
  return seen
}

test('a commit that lost the race is decided again and lands', async () => {
  const id = await running()
  const seen = interleave(1)
  const res = await call('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'cancelled' })
  expect({ status: res.status, body: await json(res) }).toEqual({ status: 200, body: { ok: true, status: 'cancelled' } })
  expect(seen.attempts).toBe(2)
  expect((await json(await call('GET', `/o/acme/p/_/sessions/${id}`))).status).toBe('cancelled')
})

test('a session that keeps changing is 409 CONCURRENT_UPDATE and stays as it was', async () => {
  const id = await running()
  const seen = interleave(3)
  const res = await call('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'cancelled' })
  expect(res.status).toBe(409)
  expect((await json(res)).code).toBe('CONCURRENT_UPDATE')
  expect(seen.attempts).toBe(3)
  expect((await json(await call('GET', `/o/acme/p/_/sessions/${id}`))).status).toBe('running')
  expect((await call('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'cancelled' })).status).toBe(200)
})
