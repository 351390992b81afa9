import { Database as SqliteDatabase } from 'bun:sqlite'
import { chmodSync, closeSync, constants, existsSync, fchmodSync, mkdirSync, openSync, readFileSync, statSync } from 'node:fs'
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
  /**
   * A replica of a region (src/region): LiteFS applies the primary's transactions to the file, so
   * it is opened read-only, never migrated nor checkpointed here; `waitForSchema` waits for the
   * primary's migrations to arrive.
   */
  replica?: boolean
  /** The file is in a LiteFS mount, whose folder's modes are LiteFS's own (not a DATA_DIR to keep private). */
  inLiteFs?: boolean
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
  const replica = options.replica === true
  if (path !== ':memory:' && !replica) {
    if (!options.inLiteFs) privateDataDir(dirname(path), options.warn)
    privateDbFiles(path)
  }
  const sqlite = replica
    ? new SqliteDatabase(path, { readonly: true, strict: true })
    : new SqliteDatabase(path, { create: true, strict: true })
  if (!replica) {
    sqlite.exec('PRAGMA journal_mode = WAL')
    sqlite.exec('PRAGMA synchronous = NORMAL')
  }
  sqlite.exec('PRAGMA foreign_keys = ON')
  // The admin CLI writes while the server runs; wait for the lock instead of failing.
  sqlite.exec('PRAGMA busy_timeout = 5000')
  const db = drizzle(sqlite, { schema })
  if (!replica) migrate(db, { migrationsFolder })
  let worker: Worker | null = null
  if (options.backgroundCheckpoint && path !== ':memory:' && !replica) {
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

/** How many migrations this build of agentd has (drizzle's journal). */
function migrationCount(): number {
  return (JSON.parse(readFileSync(join(migrationsFolder, 'meta/_journal.json'), 'utf8')) as { entries: unknown[] }).entries.length
}

/**
 * Waits until the database at `path` has every migration of this build applied (by the region's
 * primary; a replica never migrates), polling; false after `ms`.
 */
export async function waitForSchema(path: string, ms: number): Promise<boolean> {
  const want = migrationCount()
  for (const deadline = Date.now() + ms; ; await Bun.sleep(100)) {
    if (appliedMigrations(path) >= want) return true
    if (Date.now() >= deadline) return false
  }
}

function appliedMigrations(path: string): number {
  if (!existsSync(path)) return 0
  let sqlite: SqliteDatabase | null = null
  try {
    sqlite = new SqliteDatabase(path, { readonly: true })
    return (sqlite.query('SELECT count(*) AS n FROM __drizzle_migrations').get() as { n: number }).n
  } catch {
    return 0 // not there yet (an empty file before the first transaction arrives)
  } finally {
    sqlite?.close()
  }
}
