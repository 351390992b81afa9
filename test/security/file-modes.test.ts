import { removeDataDir } from '../helpers/cleanup'
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { chmodSync, lstatSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { createDriver } from '../../sandbox'
import { openDb } from '../../src/db/client'
import { sandboxScope } from '../../src/server'
import { sweepScope } from '../helpers/cleanup'
import { script } from '../helpers/http'
import { admin, startServer, type RunningServer } from '../helpers/server'
import { ISOLATING } from './helpers'
import { settled } from '../helpers/sessions'

/**
 * agentd runs as root beside other users of the host: nothing it keeps (the database with its
 * token hashes, artifact bytes, workspaces, sandbox state) may be readable by them. The server
 * runs as its own process, as `npm start` runs it, on a DATA_DIR that does not exist yet.
 */

/** Every path under `root` (itself included) with the permission bits of its own inode. */
function modes(root: string): Map<string, number> {
  const found = new Map<string, number>()
  const walk = (path: string) => {
    const stat = lstatSync(path)
    // A symlink's own mode is always 777 and grants nothing; what it names is checked where it lives.
    if (stat.isSymbolicLink()) return
    found.set(relative(root, path) || '.', stat.mode & 0o777)
    if (stat.isDirectory()) for (const name of readdirSync(path)) walk(join(path, name))
  }
  walk(root)
  return found
}

describe.each(ISOLATING)('DATA_DIR created by a %s server', (kind) => {
  let parent: string
  let dir: string
  let server: RunningServer
  let call: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>
  beforeAll(async () => {
    parent = mkdtempSync(join(tmpdir(), 'agentd-modes-'))
    dir = join(parent, 'data', 'agentd')
    server = await startServer({ DATA_DIR: dir, AGENTD_SANDBOX: kind })
    // The admin CLI works on the DATA_DIR the server created, while it runs (contract section 2).
    expect((await admin(dir, 'org', 'create', 'acme')).code).toBe(0)
    const token = (await admin(dir, 'user', 'create', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'admin')).json.token as string
    call = async (method, path, body) => {
      const res = await fetch(`${server.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      })
      return { status: res.status, body: await res.json().catch(() => null) }
    }
  }, 60_000)
  afterAll(async () => {
    await server?.stop()
    // The server parks its sandboxes at shutdown; remove them (and their mounted disks) first.
    await sweepScope(createDriver(kind, () => {}, { scope: sandboxScope(dir) }))
    await removeDataDir(parent)
  })

  test('after a session with an artifact, no file or folder of agentd’s under DATA_DIR has a group or other bit', async () => {
    const steps = [
      { bash: 'echo draft > draft.txt && mkdir -p notes && echo kept > notes/a.txt' },
      { artifact: { name: 'report.md', content: '# secret numbers\n' } },
      { answer: 'done' },
    ]
    const created = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script(steps) })
    expect(created.status).toBe(202)
    const id = created.body.execution_id as string
    const session = await settled(async () => (await call('GET', `/o/acme/p/_/sessions/${id}`)).body, { timeoutMs: 50_000 })
    expect(session.status).toBe('completed')
    expect((await call('GET', `/o/acme/p/_/sessions/${id}/artifacts`)).body.artifacts.map((a: { name: string }) => a.name)).toEqual([
      'report.md',
    ])

    const found = modes(dir)
    // The walk saw what matters: the database beside its WAL, the artifact's blob, the workspace.
    expect(found.get('.')).toBe(0o700)
    expect(found.get('agentd.db')).toBe(0o600)
    expect(found.get('agentd.db-wal')).toBe(0o600)
    expect([...found.keys()].some((p) => p.startsWith('blobs/') && /[0-9a-f]{64}$/.test(p))).toBe(true)
    expect([...found.keys()].some((p) => p === `sandboxes/${id}`)).toBe(true)
    expect([...found.keys()].some((p) => p.endsWith('workspace/notes/a.txt'))).toBe(true)
    // Inside `sandboxes/<id>` the sandbox writes as root and sets what modes it likes (a chmod is
    // one command away); agentd keeps that folder itself, and everything else, to its own user.
    const sandboxOwned = (path: string) => /^sandboxes\/[^/]+\/./.test(path)
    const open = [...found]
      .filter(([path, mode]) => !sandboxOwned(path) && mode & 0o077)
      .map(([path, mode]) => `${path} ${mode.toString(8)}`)
    expect(open).toEqual([])
  }, 60_000)
})

describe('a DATA_DIR that already exists', () => {
  test('open to others: left as the operator made it and reported; an older world-readable database is tightened to 0600', () => {
    const dir = mkdtempSync(join(tmpdir(), 'agentd-modes-'))
    try {
      chmodSync(dir, 0o755)
      writeFileSync(join(dir, 'agentd.db'), '')
      chmodSync(join(dir, 'agentd.db'), 0o644)
      const warnings: string[] = []
      const database = openDb(join(dir, 'agentd.db'), { warn: (line) => warnings.push(line) })
      database.close()
      expect(warnings).toEqual([expect.stringContaining(`DATA_DIR ${dir} is open to other users (mode 755)`)])
      expect(statSync(dir).mode & 0o777).toBe(0o755)
      expect(statSync(join(dir, 'agentd.db')).mode & 0o777).toBe(0o600)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
