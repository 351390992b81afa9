import { afterAll, beforeAll, expect, test } from 'bun:test'
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { HostPathError } from '../../sandbox/host-fs'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script } from '../helpers/http'

/**
 * Uploads and attachments below the HTTP layer, on a real database: expiry of unused uploads on
 * the server's clock, and the write into a workspace the sandbox controls (contract section 7).
 */

let t: TestApp
let clock = Date.now()
let scratch: string
beforeAll(async () => {
  // A 1 MiB file quota, so a test can pass it.
  t = await makeTestApp({ AGENTD_FILE_QUOTA_MB: '1' }, { now: () => clock })
  scratch = mkdtempSync(join(tmpdir(), 'agentd-files-'))
})
afterAll(async () => {
  rmSync(scratch, { recursive: true, force: true })
  await t?.[Symbol.asyncDispose]()
})

async function send(name: string, content: string | Uint8Array) {
  const form = new FormData()
  form.append('file', new File([content], name, { type: 'text/plain' }))
  return t.app.handle(
    new Request('http://localhost/o/acme/files', { method: 'POST', headers: { authorization: `Bearer ${t.admin.token}` }, body: form }),
  )
}

async function upload(name: string, content: string) {
  const res = await send(name, content)
  expect(res.status).toBe(201)
  return (await json(res)).id as string
}

const withFile = (fileId: string) => ({
  harness: 'harness_2',
  input: [
    { type: 'text', text: script([{ answer: 'ok' }]) },
    { type: 'file', source: { type: 'file', file_id: fileId } },
  ],
})

test('an upload no session uses is removed 7 days on; one a session uses stays with the session', async () => {
  const unused = await upload('unused.txt', 'u')
  const used = await upload('used.txt', 'v')
  const created = await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: withFile(used) }))
  expect(created.status).toBe(202)
  const id = (await json(created)).execution_id
  clock += 7 * 24 * 3600 * 1000 + 1
  expect(t.files.sweep()).toBe(1)
  // Gone: a file block naming it is refused. The used one is past its own expiry too: no new session may name it.
  for (const fileId of [unused, used]) {
    const answer = await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: withFile(fileId) }))
    expect(answer.status).toBe(400)
  }
  const session = await json(await t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token: t.admin.token })))
  expect(session.attachments).toEqual([{ id: used, name: 'used.txt', mime: 'text/plain', size: 1, expired_at: null }])
})

test('place writes the attachments under .agentd/attachments and names each path as the sandbox sees it', async () => {
  const fileId = await upload('notes.txt', 'hello')
  const id = (await json(await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: withFile(fileId) }))))
    .execution_id
  const workspace = mkdtempSync(join(scratch, 'ws-'))
  expect(t.files.place(id, workspace, '/workspace')).toBe(
    'Attached files:\n- /workspace/.agentd/attachments/notes.txt (text/plain, 5 bytes)',
  )
  expect(readFileSync(join(workspace, '.agentd/attachments/notes.txt'), 'utf8')).toBe('hello')
})

test('a link planted where the attachments go (a repository can hold one) reaches nothing outside the workspace', async () => {
  const fileId = await upload('notes.txt', 'attack')
  const id = (await json(await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: withFile(fileId) }))))
    .execution_id
  const outside = mkdtempSync(join(scratch, 'outside-'))
  writeFileSync(join(outside, 'notes.txt'), 'host file')

  // `.agentd` is a link to a host folder: refused, nothing written there.
  const linkedDir = mkdtempSync(join(scratch, 'ws-'))
  symlinkSync(outside, join(linkedDir, '.agentd'))
  expect(() => t.files.place(id, linkedDir, '/workspace')).toThrow(HostPathError)
  // The file itself is a link to a host file: the link is replaced, the host file untouched.
  const linkedFile = mkdtempSync(join(scratch, 'ws-'))
  mkdirSync(join(linkedFile, '.agentd/attachments'), { recursive: true })
  symlinkSync(join(outside, 'notes.txt'), join(linkedFile, '.agentd/attachments/notes.txt'))
  t.files.place(id, linkedFile, '/workspace')
  expect(lstatSync(join(linkedFile, '.agentd/attachments/notes.txt')).isSymbolicLink()).toBe(false)
  expect(readFileSync(join(linkedFile, '.agentd/attachments/notes.txt'), 'utf8')).toBe('attack')

  expect(readdirSync(outside)).toEqual(['notes.txt'])
  expect(readFileSync(join(outside, 'notes.txt'), 'utf8')).toBe('host file')
})

test('a caller past the file quota (AGENTD_FILE_QUOTA_MB) of the last 7 days gets 429, for uploads and inline documents; older files no longer count', async () => {
  clock += 8 * 24 * 3600 * 1000 // what earlier tests stored is out of the window
  const big = new Uint8Array(600 * 1024)
  expect((await send('a.bin', big)).status).toBe(201)
  const over = await send('b.bin', big)
  expect(over.status).toBe(429)
  expect((await json(over)).code).toBe('RATE_LIMITED')
  const inline = {
    harness: 'harness_2',
    input: [
      { type: 'text', text: 't' },
      {
        type: 'document',
        name: 'd.bin',
        source: { type: 'base64', media_type: 'application/octet-stream', data: Buffer.from(big).toString('base64') },
      },
    ],
  }
  const refused = await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: inline }))
  expect(refused.status).toBe(429)
  clock += 7 * 24 * 3600 * 1000 + 1
  expect((await send('c.bin', big)).status).toBe(201)
})

test('an upload the sweep removed while a create waited is a 400 at the insert, not a 500', async () => {
  const fileId = await upload('late.txt', 'late')
  const source = t.files.stored(
    { userId: t.admin.id, email: 'admin@acme.test', name: null, avatarUrl: null, via: 'user_token' },
    t.org.id,
    fileId,
    1,
  )
  clock += 7 * 24 * 3600 * 1000 + 1
  t.files.sweep()
  expect(() =>
    t.files.attach(
      { userId: t.admin.id, email: 'admin@acme.test', name: null, avatarUrl: null, via: 'user_token' },
      t.org.id,
      'no-session',
      [source],
    ),
  ).toThrow('expired while the session was being created')
})
