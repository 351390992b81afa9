import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { makeTestApp, type TestApp } from '../helpers/app'
import { script } from '../helpers/http'
import { admin } from '../helpers/server'

/**
 * The request path keeps identities, Projects and session views in memory. Other connections
 * write the same file (the admin CLI, LiteFS replaying the primary on a replica): the next request
 * after their commit must see it. Requests go over a real socket, as a client's would.
 */
let t: TestApp
let base: string
let other: Database
beforeAll(async () => {
  t = await makeTestApp()
  base = t.listen()
  other = new Database(t.config.dbPath)
  other.exec('PRAGMA busy_timeout = 5000')
})
afterAll(async () => {
  other.close()
  await t[Symbol.asyncDispose]()
})

const get = (path: string, token = t.admin.token) => fetch(`${base}${path}`, { headers: { authorization: `Bearer ${token}` } })

/** Asks twice, so that the second answer comes from whatever the first one cached. */
async function getTwice(path: string, token?: string): Promise<Response> {
  await (await get(path, token)).arrayBuffer()
  return get(path, token)
}

describe('caches of the request path follow commits by other connections', () => {
  test('a session row changed elsewhere is what the next GET answers', async () => {
    const res = await fetch(`${base}/o/acme/p/web/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${t.admin.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'harness_1', prompt: script([{ sleep: 60_000 }]) }),
    })
    const { execution_id: id } = (await res.json()) as { execution_id: string }
    const path = `/o/acme/p/web/sessions/${id}`
    expect(((await (await getTwice(path)).json()) as { summary: unknown }).summary).not.toBe('summed up elsewhere')
    other.run('UPDATE sessions SET summary = ? WHERE id = ?', ['summed up elsewhere', id])
    expect(((await (await get(path)).json()) as { summary: unknown }).summary).toBe('summed up elsewhere')
  })

  test('a token revoked elsewhere is refused on the next request', async () => {
    const { token } = t.identity.createUser('acme', 'leaving@acme.test', 'member')
    expect((await getTwice('/o/acme/p/_/sessions', token)).status).toBe(200)
    other.run('UPDATE user_tokens SET revoked_at = ? WHERE user_id = (SELECT id FROM users WHERE email = ?)', [
      Date.now(),
      'leaving@acme.test',
    ])
    expect((await get('/o/acme/p/_/sessions', token)).status).toBe(401)
  })

  test('a member removed elsewhere no longer sees the org', async () => {
    const { token } = t.identity.createUser('acme', 'moved@acme.test', 'member')
    expect((await getTwice('/o/acme/p/_/sessions', token)).status).toBe(200)
    other.run('DELETE FROM memberships WHERE user_id = (SELECT id FROM users WHERE email = ?)', ['moved@acme.test'])
    expect((await get('/o/acme/p/_/sessions', token)).status).toBe(404)
  })

  test('an API key revoked elsewhere, or whose creator left the org, is refused on the next request', async () => {
    const keys = `/o/acme/api-keys`
    const mint = async () => {
      const res = await fetch(`${base}${keys}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${creator.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'poller' }),
      })
      return (await res.json()) as { id: string; secret: string }
    }
    const creator = t.identity.createUser('acme', 'keeper@acme.test', 'admin')
    const revoked = await mint()
    const orphaned = await mint()
    for (const key of [revoked, orphaned]) expect((await getTwice('/o/acme/p/_/sessions', key.secret)).status).toBe(200)
    other.run('UPDATE api_keys SET revoked_at = ? WHERE id = ?', [Date.now(), revoked.id])
    expect((await get('/o/acme/p/_/sessions', revoked.secret)).status).toBe(401)
    expect((await get('/o/acme/p/_/sessions', orphaned.secret)).status).toBe(200)
    other.run('DELETE FROM memberships WHERE user_id = (SELECT id FROM users WHERE email = ?)', ['keeper@acme.test'])
    expect((await get('/o/acme/p/_/sessions', orphaned.secret)).status).toBe(401)
  })

  test('a Project the admin CLI creates after a 404 is found on the next request', async () => {
    expect((await getTwice('/o/acme/p/docs/sessions')).status).toBe(404)
    const made = await admin(t.dir, 'project', 'create', '--org', 'acme', '--name', 'docs')
    expect(made.code).toBe(0)
    expect((await get('/o/acme/p/docs/sessions')).status).toBe(200)
  })
})
