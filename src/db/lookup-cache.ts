import type { Database } from 'bun:sqlite'
import { DataCache, DataVersion } from './data-version'

const MAX_AGE_MS = 5_000

/**
 * Answers of lookups that run on every request (identity's token → user and user + org → role, a
 * session view's starter), kept while nothing could have changed them (see DataVersion: no commit
 * by another connection, no write here), and for at most a few seconds either way.
 */
export class LookupCache<T> {
  private readonly entries: DataCache<{ value: T; at: number }>

  constructor(
    sqlite: Database,
    private readonly now: () => number = Date.now,
  ) {
    this.entries = new DataCache(DataVersion.of(sqlite))
  }

  get(key: string, load: () => T): T {
    const now = this.now()
    const hit = this.entries.get(key)
    if (hit && now - hit.at < MAX_AGE_MS) return hit.value
    const value = load()
    this.entries.set(key, { value, at: now })
    return value
  }
}
