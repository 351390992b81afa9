import type { Database } from 'bun:sqlite'

/**
 * When the caches of the request path must forget: a generation that moves with SQLite's
 * `data_version` (another connection committed: the admin CLI, LiteFS applying the primary's
 * transactions on a replica; it never moves for this connection's own writes) and with `bump`,
 * which this process's writers of cached things (identities, keys) call.
 *
 * Reading `data_version` takes a read lock, a few microseconds, and several caches ask on every
 * request; so one reading serves the rest of the event-loop turn it was taken in. A commit by
 * another process is therefore seen from the next turn on, as if the request had arrived a moment
 * earlier.
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
  private seen = -1
  private generation = 0
  private fresh = false
  private readonly expire = () => {
    this.fresh = false
  }

  private constructor(sqlite: Database) {
    this.pragma = sqlite.prepare<{ data_version: number }, []>('PRAGMA data_version')
  }

  read(): number {
    if (!this.fresh) {
      const version = this.pragma.get()!.data_version
      if (version !== this.seen) {
        this.seen = version
        this.generation++
      }
      this.fresh = true
      setImmediate(this.expire)
    }
    return this.generation
  }

  /** This process changed something a cache may hold; every cache of the connection forgets. */
  bump(): void {
    this.generation++
  }
}

/**
 * A map of what was read from one connection, forgotten all at once when its DataVersion
 * generation moves. Bounded: past `max` entries the oldest goes.
 */
export class DataCache<V> {
  private readonly entries = new Map<string, V>()
  private generation = -1

  constructor(
    private readonly version: DataVersion,
    private readonly max = 10_000,
  ) {}

  get(key: string): V | undefined {
    this.sync()
    return this.entries.get(key)
  }

  set(key: string, value: V): void {
    this.sync()
    if (this.entries.size >= this.max && !this.entries.has(key)) this.entries.delete(this.entries.keys().next().value!)
    this.entries.set(key, value)
  }

  delete(key: string): void {
    this.entries.delete(key)
  }

  private sync(): void {
    const generation = this.version.read()
    if (generation !== this.generation) {
      this.entries.clear()
      this.generation = generation
    }
  }
}
