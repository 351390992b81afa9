import { Database as SqliteDatabase } from 'bun:sqlite'
import { mkdirSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { drizzle } from 'drizzle-orm/bun-sqlite'
import { migrate } from 'drizzle-orm/bun-sqlite/migrator'
import * as schema from './schema'

export type Db = ReturnType<typeof openDb>['db']

const migrationsFolder = join(import.meta.dir, 'migrations')

/** Opens (creating if needed) the SQLite file, sets the pragmas and applies pending migrations. */
export function openDb(path: string) {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true })
  const sqlite = new SqliteDatabase(path, { create: true, strict: true })
  sqlite.exec('PRAGMA journal_mode = WAL')
  sqlite.exec('PRAGMA synchronous = NORMAL')
  sqlite.exec('PRAGMA foreign_keys = ON')
  // The admin CLI writes while the server runs; wait for the lock instead of failing.
  sqlite.exec('PRAGMA busy_timeout = 5000')
  const db = drizzle(sqlite, { schema })
  migrate(db, { migrationsFolder })
  return { db, sqlite, close: () => sqlite.close() }
}
