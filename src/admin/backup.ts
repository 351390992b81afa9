import type { Database } from 'bun:sqlite'
import { GENERATED_KEY_FILE } from '../accounts/config'
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/**
 * `npm run admin -- backup <dir>` and `restore <dir>`: a consistent copy of what agentd needs to
 * serve every session again. The database is copied with `VACUUM INTO` (SQLite's online snapshot:
 * one read transaction, so a running server keeps writing meanwhile); then the artifact blobs,
 * which are content-addressed and written before the row that names them commits, so every blob
 * the snapshot names is there to copy. Sandboxes (workspaces, homes, gVisor checkpoints) are not
 * copied, only listed: a restored server treats their sessions as after a crash.
 */

export interface BackupManifest {
  format: 'agentd-backup/1'
  created_at: string
  database: string
  blobs: number
  /**
   * Whether the sealing key agentd generated (DATA_DIR/encryption.key) is in the backup: without it
   * no sealed value (secrets, provider keys, tool-server tokens) opens after a restore. A key from
   * the config file is the operator's to keep.
   */
  encryption_key?: boolean
  /** Sandboxes that existed on the host, not in the backup: their sessions fail as after a crash. */
  sandboxes_not_included: string[]
}

const DB_FILE = 'agentd.db'

/** A backup or restore that cannot be done as asked (exit 2, with the reason). */
export class BackupError extends Error {
  override name = 'BackupError'
}

export function backup(db: Database, dataDir: string, target: string): BackupManifest {
  if (existsSync(target) && readdirSync(target).length > 0)
    throw new BackupError(`${target} is not empty: a backup goes into a new or empty folder`)
  mkdirSync(target, { recursive: true, mode: 0o700 })
  const dbCopy = join(target, DB_FILE)
  db.run('VACUUM INTO ?', [dbCopy])
  const blobs = copyTree(join(dataDir, 'blobs'), join(target, 'blobs'))
  const key = join(dataDir, GENERATED_KEY_FILE)
  if (existsSync(key)) copyPrivate(key, join(target, GENERATED_KEY_FILE))
  const sandboxes = join(dataDir, 'sandboxes')
  const manifest: BackupManifest = {
    format: 'agentd-backup/1',
    created_at: new Date().toISOString(),
    database: DB_FILE,
    blobs,
    encryption_key: existsSync(key),
    sandboxes_not_included: existsSync(sandboxes)
      ? readdirSync(sandboxes)
          .filter((name) => !name.startsWith('.'))
          .sort()
      : [],
  }
  writeFileSync(join(target, 'MANIFEST.json'), `${JSON.stringify(manifest, null, 2)}\n`, { mode: 0o600 })
  return manifest
}

/** Puts a backup into `dataDir`, which must hold no database yet (the server stopped, or a new machine). */
export function restore(source: string, dataDir: string, dbPath: string): BackupManifest {
  const manifestFile = join(source, 'MANIFEST.json')
  if (!existsSync(manifestFile)) throw new BackupError(`${source} holds no agentd backup (no MANIFEST.json)`)
  const manifest = JSON.parse(readFileSync(manifestFile, 'utf8')) as BackupManifest
  if (manifest.format !== 'agentd-backup/1') throw new BackupError(`${source}: unknown backup format ${JSON.stringify(manifest.format)}`)
  // An old database's WAL beside the restored file would be replayed into it; an old sandbox would be
  // taken for a session's own. The operator moves them aside (all of agentd.db*, and sandboxes/).
  for (const leftover of [dbPath, `${dbPath}-wal`, `${dbPath}-shm`]) {
    if (existsSync(leftover))
      throw new BackupError(`${leftover} exists: restore into a DATA_DIR without a database (stop the server, move agentd.db* aside)`)
  }
  const sandboxes = join(dataDir, 'sandboxes')
  if (existsSync(sandboxes) && readdirSync(sandboxes).some((name) => !name.startsWith('.'))) {
    throw new BackupError(
      `${sandboxes} holds sandboxes of another run: restore into a DATA_DIR without them (move sandboxes/ aside, ` +
        'after unmounting what is mounted below it)',
    )
  }
  const key = join(dataDir, GENERATED_KEY_FILE)
  const savedKey = join(source, GENERATED_KEY_FILE)
  if (manifest.encryption_key && existsSync(key) && !readFileSync(key).equals(readFileSync(savedKey))) {
    throw new BackupError(`${key} is another key than the backup's: the restored secrets would not open (move it aside)`)
  }
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  if (manifest.encryption_key && !existsSync(key)) copyPrivate(savedKey, key)
  copyTree(join(source, 'blobs'), join(dataDir, 'blobs'))
  // The database last: a restore cut short leaves no database, so it can simply be run again.
  copyFileSync(join(source, manifest.database), `${dbPath}.restoring`)
  renameSync(`${dbPath}.restoring`, dbPath)
  return manifest
}

/** Copies one file readable by its owner only. */
function copyPrivate(from: string, to: string): void {
  copyFileSync(from, `${to}.copying`)
  chmodSync(`${to}.copying`, 0o600)
  renameSync(`${to}.copying`, to)
}

/** Copies regular files below `from` to `to` (folders 0700, files 0600); the number copied. */
function copyTree(from: string, to: string): number {
  if (!existsSync(from)) return 0
  mkdirSync(to, { recursive: true, mode: 0o700 })
  let copied = 0
  for (const name of readdirSync(from)) {
    if (name.startsWith('.')) continue // a blob still being written
    const source = join(from, name)
    const stat = statSync(source)
    if (stat.isDirectory()) copied += copyTree(source, join(to, name))
    else if (stat.isFile()) {
      copyFileSync(source, join(to, name))
      copied++
    }
  }
  return copied
}
