/**
 * The order queued sessions are started in, fair across orgs: round robin, the org served least
 * recently first (an org never served before any other), each org's own runs oldest first. One
 * org's batch of hundreds thus never keeps another org's single run waiting behind it. A place is
 * the host-wide one at the moment it is read: it moves forward as sessions start, and back by one
 * when an org with nothing started yet queues a run. The service records each admission; the read
 * side asks for places. In memory: after a restart every org starts even.
 */
export class AdmissionQueue {
  private readonly served = new Map<string, number>()
  private clock = 0

  /** One of `orgId`'s sessions got a sandbox slot now. */
  admitted(orgId: string): void {
    this.served.set(orgId, ++this.clock)
  }

  /** `rows` (queued sessions, oldest first) in the order they will be started. */
  order<T extends { orgId: string }>(rows: T[]): T[] {
    const waiting = new Map<string, T[]>()
    for (const row of rows) {
      const own = waiting.get(row.orgId)
      if (own) own.push(row)
      else waiting.set(row.orgId, [row])
    }
    const served = new Map(this.served)
    let clock = this.clock
    const ordered: T[] = []
    while (waiting.size > 0) {
      // Orgs enter the map in the age of their oldest run, so a tie (never served) goes by age.
      let next: string | null = null
      for (const orgId of waiting.keys()) if (next === null || (served.get(orgId) ?? 0) < (served.get(next) ?? 0)) next = orgId
      const own = waiting.get(next!)!
      ordered.push(own.shift()!)
      if (own.length === 0) waiting.delete(next!)
      served.set(next!, ++clock)
    }
    return ordered
  }

  /** 1-based places of queued sessions (the read's `queue_position`). */
  positions<T extends { id: string; orgId: string }>(rows: T[]): Map<string, number> {
    return new Map(this.order(rows).map((row, i) => [row.id, i + 1]))
  }
}
