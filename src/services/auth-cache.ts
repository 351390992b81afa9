import type { Database } from 'bun:sqlite'
import { DataVersion } from '../db/data-version'

const MAX_AGE_MS = 5_000
const MAX_ENTRIES = 10_000

/**
 * Answers of identity lookups that run on every request (token → user, user + org → role),
 * kept while nothing could have changed them (see DataVersion: no commit by another connection,
 * no write of identities here), and for at most a few seconds either way.
 */
export class AuthCache<T> {
  private readonly entries = new Map<string, { value: T; at: number }>()
  private readonly dataVersion
  private version = -1

  constructor(
    sqlite: Database,
    private readonly now: () => number = Date.now,
  ) {
    this.dataVersion = DataVersion.of(sqlite)
  }

  get(key: string, load: () => T): T {
    const version = this.dataVersion.read()
    if (version !== this.version) {
      this.entries.clear()
      this.version = version
    }
    const now = this.now()
    const hit = this.entries.get(key)
    if (hit && now - hit.at < MAX_AGE_MS) return hit.value
    const value = load()
    if (this.entries.size >= MAX_ENTRIES) this.entries.clear()
    this.entries.set(key, { value, at: now })
    return value
  }
}
