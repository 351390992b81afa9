import { afterAll, beforeAll, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * Artifact blobs live as long as an artifact names them: when a session's rows go (deleted with
 * their session, or with its org), the hourly sweep deletes the blobs no artifact names any more,
 * and keeps one another session's artifact still shares by content.
 */
let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
})
afterAll(() => t?.[Symbol.asyncDispose]())

const blobs = () =>
  readdirSync(join(t.dir, 'blobs'))
    .filter((d) => !d.startsWith('.'))
    .flatMap((d) => readdirSync(join(t.dir, 'blobs', d)))

async function run(content: string): Promise<string> {
  const res = await t.app.handle(
    req('POST', '/o/acme/p/_/sessions', {
      token: t.admin.token,
      body: { agent: 'harness_2', prompt: script([{ artifact: { name: 'out.txt', content } }, { answer: 'ok' }]) },
    }),
  )
  const id = (await json(res)).execution_id as string
  await waitFor(
    async () => t.store.get(id)!,
    (row) => row.status === 'completed',
    60_000,
  )
  return id
}

test('blobs of deleted sessions go with the sweep; a blob another session still names stays; fresh blobs wait out the grace period', async () => {
  const shared = await run('the same bytes')
  const alsoShared = await run('the same bytes')
  const own = await run('bytes of its own')
  expect(blobs()).toHaveLength(2)
  // The rows of two sessions go (as with their session or org): their artifacts cascade.
  t.store.events.flush()
  const sqlite = new Database(t.config.dbPath)
  sqlite.run('PRAGMA foreign_keys = ON')
  sqlite.run('PRAGMA busy_timeout = 5000')
  for (const id of [shared, own]) sqlite.run('DELETE FROM sessions WHERE id = ?', [id])
  sqlite.close()
  // Within the grace period nothing goes: a collect in progress writes blobs before their rows.
  expect(t.artifacts.sweep(60 * 60_000)).toBe(0)
  expect(t.artifacts.sweep(0)).toBe(1)
  expect(blobs()).toHaveLength(1)
  const left = await t.app.handle(req('GET', `/o/acme/p/_/sessions/${alsoShared}/artifacts/out.txt`, { token: t.admin.token }))
  expect(await left.text()).toBe('the same bytes')
  expect(existsSync(join(t.dir, 'blobs'))).toBe(true)
})
