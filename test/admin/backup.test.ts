import { afterAll, expect, test } from 'bun:test'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { litestreamBinary } from '../../src/db/litestream'
import { removeDataDir } from '../helpers/cleanup'
import { script } from '../helpers/http'
import { poll } from '../helpers/poll'
import { admin, client, seededDataDir, startServer, type RunningServer } from '../helpers/server'

/**
 * `npm run admin -- backup` while a real server is under load (sessions being created and turns
 * writing events), then `restore` into a new DATA_DIR: a server started on it serves every session
 * the backup holds, with its artifacts.
 */

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await removeDataDir(dir)
})

test('a backup taken under load restores to a server that serves every session and artifact it held', async () => {
  const seeded = await seededDataDir('agentd-backup')
  dirs.push(seeded.dir)
  let server: RunningServer = await startServer({ DATA_DIR: seeded.dir, AGENTD_SANDBOX: 'process' })
  const call = client(() => server, seeded.token)
  const backupDir = join(mkdtempSync(join(tmpdir(), 'agentd-backup-copy-')), 'backup')
  dirs.push(join(backupDir, '..'))
  try {
    // A Project secret, sealed under the key the server generated in DATA_DIR: it must open after a restore.
    expect((await admin(seeded.dir, 'project', 'create', '--org', 'acme', '--name', 'web')).code).toBe(0)
    const put = await fetch(`${server.url}/o/acme/projects/web/secrets/APP_TOKEN`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${seeded.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ value: 'restored-secret-value' }),
    })
    expect(put.status).toBe(204)
    const done: string[] = []
    for (let i = 0; i < 4; i++) {
      const created = await call('POST', '/o/acme/p/_/sessions', {
        agent: 'harness_2',
        prompt: script([{ artifact: { name: `report-${i}.md`, content: `# report ${i}` } }, { answer: `done ${i}` }]),
      })
      done.push(created.body.execution_id)
    }
    await poll(
      'the first sessions to complete',
      async () => {
        const views = await Promise.all(done.map((id) => call('GET', `/o/acme/p/_/sessions/${id}`)))
        return views.every((v) => v.body.status === 'completed')
      },
      { timeoutMs: 60_000 },
    )

    // Load: new sessions keep coming, and a turn keeps writing, while the backup is taken.
    let loading = true
    const made: string[] = []
    const load = (async () => {
      while (loading) {
        const created = await call('POST', '/o/acme/p/_/sessions', {
          agent: 'harness_2',
          prompt: script([{ say: 'busy' }, { sleep: 200 }, { say: 'still busy' }, { answer: 'ok' }]),
        })
        made.push(created.body.execution_id)
        await Bun.sleep(20)
      }
    })()
    await poll('load to build up', () => made.length >= 3, { timeoutMs: 30_000 })
    // Sessions whose create had answered before the backup began are certainly in it.
    const before = made.length
    const taken = await admin(seeded.dir, 'backup', backupDir)
    loading = false
    await load
    expect(taken.code).toBe(0)
    expect(taken.json).toMatchObject({ format: 'agentd-backup/1', database: 'agentd.db', blobs: 4, encryption_key: true })
    expect(taken.json.sandboxes_not_included.length).toBeGreaterThanOrEqual(4)
    // For agentd's user only, like DATA_DIR itself.
    for (const name of readdirSync(backupDir)) expect(statSync(join(backupDir, name)).mode & 0o077).toBe(0)
    // A second backup into the same folder is refused.
    expect((await admin(seeded.dir, 'backup', backupDir)).code).toBe(2)
    await server.stop()

    // A new machine: restore, start, and every session of the backup is there.
    const fresh = mkdtempSync(join(tmpdir(), 'agentd-restored-'))
    dirs.push(fresh)
    const restored = await admin(fresh, 'restore', backupDir)
    expect(restored.code).toBe(0)
    // Not over a database: the operator moves the old one aside first.
    expect((await admin(fresh, 'restore', backupDir)).code).toBe(2)
    server = await startServer({ DATA_DIR: fresh, AGENTD_SANDBOX: 'process' })
    const listed = (await call('GET', '/o/acme/p/_/sessions?limit=100')).body.executions.map(
      (s: { execution_id: string }) => s.execution_id,
    )
    for (const id of [...done, ...made.slice(0, before)]) expect(listed).toContain(id)
    // The generated sealing key came back with it (0600): the Project's secret opens for its session.
    expect(readFileSync(join(fresh, 'encryption.key'))).toEqual(readFileSync(join(seeded.dir, 'encryption.key')))
    expect(statSync(join(fresh, 'encryption.key')).mode & 0o777).toBe(0o600)
    const uses = await call('POST', '/o/acme/p/web/sessions', {
      agent: 'harness_2',
      prompt: script([{ bash: 'test "$APP_TOKEN" = restored-secret-value && echo opened' }, { answer: 'ok' }]),
    })
    await poll(
      'the secret-using session to complete',
      async () => (await call('GET', `/o/acme/p/web/sessions/${uses.body.execution_id}`)).body.status === 'completed',
      { timeoutMs: 60_000 },
    )
    const calls = (await call('GET', `/o/acme/p/web/sessions/${uses.body.execution_id}/tool-calls`)).body
    expect(JSON.stringify(calls)).toContain('opened')
    for (const [i, id] of done.entries()) {
      const view = await call('GET', `/o/acme/p/_/sessions/${id}`)
      expect(view.body).toMatchObject({ status: 'completed', artifact_count: 1 })
      const res = await fetch(`${server.url}/o/acme/p/_/sessions/${id}/artifacts/report-${i}.md`, {
        headers: { authorization: `Bearer ${seeded.token}` },
      })
      expect(await res.text()).toBe(`# report ${i}`)
    }
  } finally {
    await server.stop()
  }
}, 120_000)

test('restore refuses a folder that is no backup; backup refuses a folder that is not empty', async () => {
  const seeded = await seededDataDir('agentd-backup-bad')
  dirs.push(seeded.dir)
  const notBackup = mkdtempSync(join(tmpdir(), 'agentd-not-backup-'))
  dirs.push(notBackup)
  writeFileSync(join(notBackup, 'hello.txt'), 'hi')
  const fresh = mkdtempSync(join(tmpdir(), 'agentd-restored-'))
  dirs.push(fresh)
  const restore = await admin(fresh, 'restore', notBackup)
  expect(restore.code).toBe(2)
  expect(restore.stderr).toContain('no MANIFEST.json')
  const backup = await admin(seeded.dir, 'backup', notBackup)
  expect(backup.code).toBe(2)
  expect(backup.stderr).toContain('not empty')
  expect((await admin(seeded.dir, 'backup')).code).toBe(2)
  // A wrong DATA_DIR would back up a new, empty database: refused.
  const missing = await admin(join(fresh, 'no-such-data-dir'), 'backup', join(fresh, 'b1'))
  expect(missing.code).toBe(2)
  expect(missing.stderr).toContain('does not exist')
})

test('restore refuses a DATA_DIR with an old database’s WAL or old sandboxes beside it', async () => {
  const seeded = await seededDataDir('agentd-backup-src')
  dirs.push(seeded.dir)
  const copy = join(mkdtempSync(join(tmpdir(), 'agentd-backup-copy-')), 'b')
  dirs.push(join(copy, '..'))
  expect((await admin(seeded.dir, 'backup', copy)).code).toBe(0)
  const withWal = mkdtempSync(join(tmpdir(), 'agentd-restored-'))
  dirs.push(withWal)
  writeFileSync(join(withWal, 'agentd.db-wal'), 'old frames')
  const wal = await admin(withWal, 'restore', copy)
  expect({ code: wal.code, says: wal.stderr.includes('agentd.db-wal exists') }).toEqual({ code: 2, says: true })
  const withSandboxes = mkdtempSync(join(tmpdir(), 'agentd-restored-'))
  dirs.push(withSandboxes)
  mkdirSync(join(withSandboxes, 'sandboxes', 'some-session'), { recursive: true })
  const old = await admin(withSandboxes, 'restore', copy)
  expect({ code: old.code, says: old.stderr.includes('holds sandboxes of another run') }).toEqual({ code: 2, says: true })
})

test('with AGENTD_LITESTREAM_URL the database is replicated while the server runs; litestream restore brings every session back', async () => {
  const seeded = await seededDataDir('agentd-litestream')
  dirs.push(seeded.dir)
  const replica = mkdtempSync(join(tmpdir(), 'agentd-replica-'))
  dirs.push(replica)
  let server = await startServer({ DATA_DIR: seeded.dir, AGENTD_SANDBOX: 'process', AGENTD_LITESTREAM_URL: `file://${replica}` })
  const call = client(() => server, seeded.token)
  const ids: string[] = []
  try {
    for (let i = 0; i < 3; i++)
      ids.push(
        (await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: script([{ answer: `replicated ${i}` }]) })).body
          .execution_id,
      )
    await poll(
      'the sessions to complete',
      async () =>
        (await Promise.all(ids.map((id) => call('GET', `/o/acme/p/_/sessions/${id}`)))).every((v) => v.body.status === 'completed'),
      { timeoutMs: 60_000 },
    )
    expect(server.log()).toContain('litestream: ')
  } finally {
    // SIGTERM: the server stops writing, lets Litestream copy the last writes, then stops it.
    await server.stop()
  }
  expect(readdirSync(replica).length).toBeGreaterThan(0)

  const fresh = mkdtempSync(join(tmpdir(), 'agentd-from-replica-'))
  dirs.push(fresh)
  const restore = Bun.spawnSync([litestreamBinary(), 'restore', '-o', join(fresh, 'agentd.db'), `file://${replica}`], { stderr: 'pipe' })
  expect({ code: restore.exitCode, stderr: restore.stderr.toString().slice(0, 300) }).toEqual({ code: 0, stderr: expect.any(String) })
  server = await startServer({ DATA_DIR: fresh, AGENTD_SANDBOX: 'process' })
  try {
    for (const [i, id] of ids.entries()) {
      const result = await call('GET', `/o/acme/p/_/sessions/${id}/result`)
      expect(result.body.result.text).toBe(`replicated ${i}`)
    }
  } finally {
    await server.stop()
  }
}, 120_000)
