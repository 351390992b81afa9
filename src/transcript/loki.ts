/**
 * Session logs in Loki (spec 4.2 `source: loki`), with AGENTD_LOKI_URL: each line a session's
 * runtime log gets (the CLI's stderr, the gateway's request lines) is pushed to Loki's HTTP API as
 * a stream labelled `{service="agentd", org, session}`, in batches; the logs route reads the run's
 * window back with `query_range`. A Loki that cannot be reached loses nothing agentd stores: the
 * route then answers from the stored log.
 */

/** A batch goes out this long after its first line, or at BATCH_LINES lines. */
const BATCH_MS = 250
const BATCH_LINES = 500
/** Lines kept waiting while Loki is slow or down; past it new lines are dropped (the store has them). */
const MAX_PENDING_LINES = 20_000
/** How long a read or a shutdown waits for the push in flight before going on without it. */
const WAIT_FOR_PUSH_MS = 1000
/** Lines one query reads (Loki's own default limit is 100). */
const QUERY_LIMIT = 5000
const TIMEOUT_MS = 5000

export interface LokiLine {
  /** Milliseconds since the epoch. */
  at: number
  line: string
}

type Stream = { org: string; values: [string, string][] }

export class LokiLogs {
  private pending = new Map<string, Stream>()
  private lines = 0
  private timer: ReturnType<typeof setTimeout> | null = null
  /** The push in flight, if any: one at a time, so a slow Loki holds one batch, not a queue of them. */
  private inFlight: Promise<void> | null = null
  /** Per session, the end of its last text that had no newline yet: a line is pushed whole. */
  private partial = new Map<string, string>()
  private orgs = new Map<string, string>()
  /** Nanosecond tie-breaker, so lines of one millisecond keep their order. */
  private seq = 0
  private warned = false

  constructor(
    private readonly url: string,
    private readonly now: () => number,
    private readonly warn: (line: string) => void,
  ) {}

  /** Queues the whole lines of `text` for the session's stream (a line cut between texts waits for its end). */
  push(sessionId: string, orgId: string, text: string): void {
    const lines = `${this.partial.get(sessionId) ?? ''}${text}`.split('\n')
    const rest = lines.pop() ?? ''
    if (rest) this.partial.set(sessionId, rest)
    else this.partial.delete(sessionId)
    this.orgs.set(sessionId, orgId)
    this.queue(sessionId, orgId, lines)
  }

  private queue(sessionId: string, orgId: string, lines: string[], schedule = true): void {
    const stream = this.pending.get(sessionId) ?? { org: orgId, values: [] }
    this.pending.set(sessionId, stream)
    const ns = BigInt(this.now()) * 1_000_000n
    for (const line of lines) {
      if (this.lines >= MAX_PENDING_LINES) break
      stream.values.push([(ns + BigInt(this.seq++ % 1_000_000)).toString(), line])
      this.lines++
    }
    if (!schedule) return
    if (this.lines >= BATCH_LINES) void this.flush()
    else this.timer ??= setTimeout(() => void this.flush(), BATCH_MS)
  }

  /** Sends what is queued, unless a push is in flight (then its end sends the rest). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    if (this.inFlight) return this.inFlight
    // A line still without its end goes out as it is: a log's last line may never get one.
    for (const [session, rest] of this.partial) this.queue(session, this.orgs.get(session) ?? '', [rest], false)
    this.partial.clear()
    const batch = this.pending
    this.pending = new Map()
    this.lines = 0
    if (batch.size === 0) return Promise.resolve()
    const body = {
      streams: [...batch].map(([session, { org, values }]) => ({ stream: { service: 'agentd', org, session }, values })),
    }
    this.inFlight = (async () => {
      try {
        const res = await fetch(`${this.url}/loki/api/v1/push`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(TIMEOUT_MS),
        })
        if (!res.ok) throw new Error(`Loki answered ${res.status}`)
      } catch (err) {
        // Said once: the stored log has every line either way.
        if (!this.warned) this.warn(`agentd: session logs not pushed to Loki (${(err as Error).message}); they stay in the stored log`)
        this.warned = true
      } finally {
        this.inFlight = null
        if (this.lines > 0) void this.flush()
      }
    })()
    return this.inFlight
  }

  /** At shutdown: cut lines go out as they are, and the last pushes get a moment, no more. */
  async close(): Promise<void> {
    await this.settle()
  }

  /** Sends everything queued, push after push, for at most WAIT_FOR_PUSH_MS. */
  private async settle(): Promise<void> {
    const deadline = performance.now() + WAIT_FOR_PUSH_MS
    while ((this.inFlight || this.lines > 0 || this.partial.size > 0) && performance.now() < deadline) {
      await Promise.race([this.flush(), Bun.sleep(deadline - performance.now())])
    }
  }

  /**
   * The session's newest lines (up to QUERY_LIMIT) between `startMs` and `endMs`, oldest first,
   * and whether there were more; null when Loki cannot answer. What was queued is sent first, but a
   * slow push is not waited for long.
   */
  async query(sessionId: string, startMs: number, endMs: number): Promise<{ lines: LokiLine[]; more: boolean } | null> {
    await this.settle()
    const params = new URLSearchParams({
      query: `{service="agentd", session="${sessionId.replace(/["\\]/g, '')}"}`,
      start: `${BigInt(startMs) * 1_000_000n}`,
      end: `${BigInt(endMs) * 1_000_000n}`,
      limit: String(QUERY_LIMIT),
      // The newest first: when there are more, the end of a log is what matters (a failure shows there).
      direction: 'backward',
    })
    try {
      const res = await fetch(`${this.url}/loki/api/v1/query_range?${params}`, { signal: AbortSignal.timeout(TIMEOUT_MS) })
      if (!res.ok) return null
      const body = (await res.json()) as { status?: string; data?: { resultType?: string; result?: { values?: [string, string][] }[] } }
      if (body.status !== 'success' || body.data?.resultType !== 'streams') return null
      const values = (body.data.result ?? []).flatMap((stream) => stream.values ?? [])
      const lines = values
        .sort((a, b) => (BigInt(a[0]) < BigInt(b[0]) ? -1 : 1))
        .map(([ns, line]) => ({ at: Number(BigInt(ns) / 1_000_000n), line }))
      return { lines, more: values.length >= QUERY_LIMIT }
    } catch {
      return null
    }
  }
}
