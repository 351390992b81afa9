/**
 * Read buffers that come back. A CLI flooding its output makes agentd read hundreds of MB through
 * 64 KiB buffers; allocated fresh, each is garbage a moment later, and the collector's full
 * collections then pause the API thread for tens of ms (up to 115 ms on a loaded machine, seen
 * as a failed responsiveness test). A consumer that keeps no view of a chunk once it has handled
 * it hands it back with `giveBack`, and the next read fills it again.
 */

/** The pool each lent chunk returns to, and the whole buffer it is a view of. */
const lent = new WeakMap<Uint8Array, { pool: ChunkPool; whole: Buffer }>()

export class ChunkPool {
  private readonly free: Buffer[] = []

  /** `size`: bytes per buffer; `keep`: buffers kept for reuse at most (the rest are left to the collector). */
  constructor(
    readonly size: number,
    private readonly keep: number,
  ) {}

  /** A buffer to read into: a returned one, or a new one. */
  take(): Buffer {
    return this.free.pop() ?? Buffer.allocUnsafe(this.size)
  }

  /** `view` (of `whole`, which came from `take`) is handed on; `giveBack(view)` returns `whole`. */
  lend(view: Uint8Array, whole: Buffer): Uint8Array {
    lent.set(view, { pool: this, whole })
    return view
  }

  /** `whole` was never handed on (nothing was read into it). */
  putBack(whole: Buffer): void {
    if (this.free.length < this.keep) this.free.push(whole)
  }
}

/**
 * The consumer of a chunk holds no view of it any more: a pooled one goes back to be read into
 * again. Any other chunk is left alone, so a consumer may call this on whatever it reads.
 */
export function giveBack(chunk: Uint8Array): void {
  const entry = lent.get(chunk)
  if (!entry) return
  lent.delete(chunk)
  entry.pool.putBack(entry.whole)
}
