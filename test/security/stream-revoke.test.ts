import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'
import { openSse, type SseFrame } from '../helpers/sse'

/**
 * An event stream is authenticated once, when it opens; these prove that it does not outlive the
 * credential it was opened with. The session's turn stalls for ten minutes, so only revocation can
 * end a stream here (never a `done`).
 */
let t: TestApp
let base: string
let events: string
beforeAll(async () => {
  t = await makeTestApp({}, { sseKeepaliveMs: 200 })
  base = t.listen()
  const created = await t.app.handle(
    req('POST', '/o/acme/p/_/sessions', {
      token: t.admin.token,
      body: { agent: 'harness_1', prompt: script([{ sleep: 600_000 }, { answer: 'late' }]) },
    }),
  )
  expect(created.status).toBe(202)
  const id = (await json(created)).execution_id as string
  const path = `/o/acme/p/_/sessions/${id}`
  await waitFor(
    async () => (await json(await t.app.handle(req('GET', path, { token: t.admin.token })))).status,
    (s) => s === 'running',
  )
  events = `${base}${path}/events`
}, 60_000)
afterAll(() => t[Symbol.asyncDispose]())

const within = <T>(promise: Promise<T>, ms: number, what: string): Promise<T> =>
  Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms))])

async function createKey(name: string): Promise<{ id: string; secret: string }> {
  const res = await t.app.handle(req('POST', '/o/acme/api-keys', { token: t.admin.token, body: { name } }))
  expect(res.status).toBe(201)
  return json(res)
}

const status = async (token: string) => (await t.app.handle(req('GET', '/o/acme/p/_/sessions', { token }))).status

/** Opens the stream as `token` and reads it up to the `running` status, so it is live. */
async function follow(token: string) {
  const sse = await openSse(events, token)
  expect(sse.status).toBe(200)
  const opening = await sse.frames(3)
  expect(opening.map((f) => f.data.status)).toEqual(['queued', 'allocating', 'running'])
  return sse
}

/** The stream ends (the reader sees the end) with an `error` event, and no `done`, within 10 s. */
async function expectEnded(sse: Awaited<ReturnType<typeof follow>>) {
  const rest: SseFrame[] = await within(sse.frames(), 10_000, 'the stream did not end')
  expect(rest.at(-1)).toMatchObject({ event: 'error', data: { message: expect.stringContaining('revoked') } })
  expect(rest.some((f) => f.event === 'done')).toBe(false)
  expect(await within(sse.frames(), 10_000, 'the stream did not close after its error')).toEqual([])
}

/** Reads a stream in the background, counting keepalive comments and noting its end. */
async function watch(token: string) {
  const res = await fetch(events, { headers: { authorization: `Bearer ${token}` } })
  expect(res.status).toBe(200)
  const reader = res.body!.getReader()
  const state = { keepalives: 0, ended: false }
  void (async () => {
    const decoder = new TextDecoder()
    for (;;) {
      const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }))
      if (done) break
      state.keepalives += decoder.decode(value).split(': keepalive').length - 1
    }
    state.ended = true
  })()
  return { state, close: () => reader.cancel() }
}

// Each test waits up to 10 s for an end, longer than bun's default 5 s test timeout.
describe('an open event stream ends when its credential stops granting it', () => {
  test('an API key revoked through the API: the stream ends, the key is 401', async () => {
    const key = await createKey('revoked while streaming')
    const sse = await follow(key.secret)
    const revoked = await t.app.handle(req('DELETE', `/o/acme/api-keys/${key.id}`, { token: t.admin.token }))
    expect(revoked.status).toBe(204)
    await expectEnded(sse)
    expect(await status(key.secret)).toBe(401)
  }, 30_000)

  test('an API key rotated through the API: the old secret’s stream ends and is 401; the new one streams', async () => {
    const key = await createKey('rotated while streaming')
    const sse = await follow(key.secret)
    const rotated = await t.app.handle(req('POST', `/o/acme/api-keys/${key.id}/rotate`, { token: t.admin.token }))
    expect(rotated.status).toBe(200)
    await expectEnded(sse)
    expect(await status(key.secret)).toBe(401)
    const fresh = await follow((await json(rotated)).secret)
    fresh.close()
  }, 30_000)

  test('a member removed from the org by another process: their token’s stream ends', async () => {
    const sse = await follow(t.member.token)
    // As an operator's tool would: a commit on another connection to the same database.
    const other = new Database(t.config.dbPath)
    other.run('DELETE FROM memberships WHERE user_id = ?', [t.member.id])
    other.close()
    await expectEnded(sse)
    expect(await status(t.member.token)).toBe(404)
  }, 30_000)

  test('a stream whose credential stays valid is not ended by the rechecks', async () => {
    const key = await createKey('still valid')
    const kept = await watch(key.secret)
    const other = await createKey('revoked beside it')
    const sse = await follow(other.secret)
    expect((await t.app.handle(req('DELETE', `/o/acme/api-keys/${other.id}`, { token: t.admin.token }))).status).toBe(204)
    await expectEnded(sse)
    // Eight keepalives at 200 ms span more than one recheck (every second) after the revocation.
    const from = kept.state.keepalives
    await waitFor(
      async () => kept.state.keepalives - from,
      (n) => n >= 8,
      30_000,
    )
    expect(kept.state.ended).toBe(false)
    await kept.close()
  }, 60_000)
})
