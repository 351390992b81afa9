import type { Database } from 'bun:sqlite'

/**
 * SQLite's `data_version` for one connection: it moves when another connection commits (the admin
 * CLI, LiteFS applying the primary's transactions on a replica), never for this connection's own
 * writes. The caches of the request path compare it to decide whether what they hold can still be
 * trusted.
 *
 * Reading it takes a read lock, a few microseconds, and several caches ask on every request; so
 * one reading serves the rest of the event-loop turn it was taken in. A commit by another process
 * is therefore seen from the next turn on, as if the request had arrived a moment earlier.
 */
export class DataVersion {
  private static readonly byConnection = new WeakMap<Database, DataVersion>()

  /** The one instance of a connection, so that all its caches share a reading. */
  static of(sqlite: Database): DataVersion {
    let found = DataVersion.byConnection.get(sqlite)
    if (!found) {
      found = new DataVersion(sqlite)
      DataVersion.byConnection.set(sqlite, found)
    }
    return found
  }

  private readonly pragma
  private value = 0
  private fresh = false
  private readonly expire = () => {
    this.fresh = false
  }

  private constructor(sqlite: Database) {
    this.pragma = sqlite.prepare<{ data_version: number }, []>('PRAGMA data_version')
  }

  read(): number {
    if (!this.fresh) {
      this.value = this.pragma.get()!.data_version
      this.fresh = true
      setImmediate(this.expire)
    }
    return this.value
  }
}
