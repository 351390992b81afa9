import { Database as SqliteDatabase } from 'bun:sqlite'
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { drizzle } from 'drizzle-orm/bun-sqlite'
import { migrate } from 'drizzle-orm/bun-sqlite/migrator'
import * as schema from './schema'

export type Db = ReturnType<typeof openDb>['db']

const migrationsFolder = join(import.meta.dir, 'migrations')

export interface DbOptions {
  /**
   * Checkpoint the WAL from a background thread instead of inside commits (the server). Short
   * lived processes such as the admin CLI keep SQLite's automatic checkpoints.
   */
  backgroundCheckpoint?: boolean
}

/** Opens (creating if needed) the SQLite file, sets the pragmas and applies pending migrations. */
export function openDb(path: string, options: DbOptions = {}) {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
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
