import { expect, test } from 'bun:test'
import { existsSync, mkdtempSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { removeDataDir } from '../helpers/cleanup'
import { startServer } from '../helpers/server'

/**
 * AGENTD_DB_DIR (contract section 12) without LiteFS: the database in its own folder, everything
 * else in DATA_DIR, which the start makes private; the node is alone and primary.
 */
test('a node alone with AGENTD_DB_DIR elsewhere: the database there, DATA_DIR made private, role primary', async () => {
  const root = mkdtempSync(join(tmpdir(), 'agentd-db-dir-'))
  const dataDir = join(root, 'data')
  const dbDir = join(root, 'db')
  const server = await startServer({ DATA_DIR: dataDir, AGENTD_DB_DIR: dbDir, AGENTD_SANDBOX: 'process' })
  try {
    const health = (await (await fetch(`${server.url}/healthz`)).json()) as { role: string; txid: number }
    expect(health).toMatchObject({ role: 'primary', txid: 0 })
    expect(existsSync(join(dbDir, 'agentd.db'))).toBe(true)
    expect(existsSync(join(dataDir, 'agentd.db'))).toBe(false)
    expect(statSync(dataDir).mode & 0o777).toBe(0o700)
    expect(existsSync(join(dataDir, 'encryption.key'))).toBe(true)
  } finally {
    await server.stop()
    await removeDataDir(dataDir)
    await removeDataDir(root)
  }
})
