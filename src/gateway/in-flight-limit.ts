/**
 * At most `max` exchanges open at once per key (a session's tool server requests through the
 * egress proxy): a sandbox cannot make agentd hold sockets without end.
 */
export class InFlightLimit {
  private readonly open = new Map<string, number>()

  constructor(readonly max: number) {}

  /** Takes a slot for `key`: its release (call it once), or null when `key` has `max` open already. */
  take(key: string): (() => void) | null {
    const open = this.open.get(key) ?? 0
    if (open >= this.max) return null
    this.open.set(key, open + 1)
    return () => {
      const left = (this.open.get(key) ?? 1) - 1
      if (left > 0) this.open.set(key, left)
      else this.open.delete(key)
    }
  }
}
