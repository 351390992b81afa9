import { Database as SqliteDatabase } from 'bun:sqlite'
import { chmodSync, closeSync, constants, existsSync, fchmodSync, mkdirSync, openSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { drizzle } from 'drizzle-orm/bun-sqlite'
import { migrate } from 'drizzle-orm/bun-sqlite/migrator'
import * as schema from './schema'

export type Db = ReturnType<typeof openDb>['db']

const migrationsFolder = join(import.meta.dir, '../../drizzle')

export interface DbOptions {
  /**
   * Checkpoint the WAL from a background thread instead of inside commits (the server). Short
   * lived processes such as the admin CLI keep SQLite's automatic checkpoints.
   */
  backgroundCheckpoint?: boolean
  /** Told when DATA_DIR already existed open to other users (the server logs it). */
  warn?: (line: string) => void
}

/**
 * DATA_DIR holds the database, artifact bytes and workspaces, so only agentd's own user may enter
 * it: created 0700. An existing one is left as the operator made it (it may be a mount point or a
 * folder other things share), and said so; what agentd creates inside it is private either way.
 */
export function privateDataDir(dir: string, warn: (line: string) => void = () => {}): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const mode = statSync(dir).mode & 0o777
  if (mode & 0o077) warn(`agentd: DATA_DIR ${dir} is open to other users (mode ${mode.toString(8)}); chmod 700 it`)
}

/**
 * The database file 0600 before SQLite writes a byte: SQLite creates the -wal and -shm files with
 * the database file's mode, and would create the file itself 0644. Files an older agentd left
 * wider are tightened, since they are agentd's own.
 */
function privateDbFiles(path: string): void {
  const fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_NOFOLLOW, 0o600)
  try {
    fchmodSync(fd, 0o600)
  } finally {
    closeSync(fd)
  }
  for (const extra of [`${path}-wal`, `${path}-shm`, `${path}-journal`]) if (existsSync(extra)) chmodSync(extra, 0o600)
}

/** Opens (creating if needed) the SQLite file, sets the pragmas and applies pending migrations. */
export function openDb(path: string, options: DbOptions = {}) {
  if (path !== ':memory:') {
    privateDataDir(dirname(path), options.warn)
    privateDbFiles(path)
  }
  const sqlite = new SqliteDatabase(path, { create: true, strict: true })
  sqlite.exec('PRAGMA journal_mode = WAL')
  sqlite.exec('PRAGMA synchronous = NORMAL')
  sqlite.exec('PRAGMA foreign_keys = ON')
  // The admin CLI writes while the server runs; wait for the lock instead of failing.
  sqlite.exec('PRAGMA busy_timeout = 5000')
  const db = drizzle(sqlite, { schema })
  migrate(db, { migrationsFolder })
  let worker: Worker | null = null
  if (options.backgroundCheckpoint && path !== ':memory:') {
    sqlite.exec('PRAGMA wal_autocheckpoint = 0')
    worker = new Worker(new URL('./checkpoint-worker.ts', import.meta.url))
    worker.postMessage({ path, intervalMs: 1000 })
    worker.unref()
  }
  return {
    db,
    sqlite,
    close: () => {
      worker?.terminate()
      sqlite.close()
    },
  }
}
