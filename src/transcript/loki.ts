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
  private flushing: Promise<void> = Promise.resolve()
  /** Nanosecond tie-breaker, so lines of one millisecond keep their order. */
  private seq = 0
  private warned = false

  constructor(
    private readonly url: string,
    private readonly now: () => number,
    private readonly warn: (line: string) => void,
  ) {}

  /** Queues the lines of `text` for the session's stream. */
  push(sessionId: string, orgId: string, text: string): void {
    const stream = this.pending.get(sessionId) ?? { org: orgId, values: [] }
    this.pending.set(sessionId, stream)
    const ns = BigInt(this.now()) * 1_000_000n
    for (const line of text.split('\n')) {
      if (line === '') continue
      stream.values.push([(ns + BigInt(this.seq++ % 1_000_000)).toString(), line])
      this.lines++
    }
    if (this.lines >= BATCH_LINES) void this.flush()
    else this.timer ??= setTimeout(() => void this.flush(), BATCH_MS)
  }

  /** Sends what is queued (one push at a time, in order). */
  flush(): Promise<void> {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    const batch = this.pending
    this.pending = new Map()
    this.lines = 0
    if (batch.size === 0) return this.flushing
    const body = {
      streams: [...batch].map(([session, { org, values }]) => ({ stream: { service: 'agentd', org, session }, values })),
    }
    this.flushing = this.flushing.then(async () => {
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
      }
    })
    return this.flushing
  }

  /** The session's lines between `startMs` and `endMs`, oldest first; null when Loki cannot answer. */
  async query(sessionId: string, startMs: number, endMs: number): Promise<LokiLine[] | null> {
    await this.flush()
    const params = new URLSearchParams({
      query: `{service="agentd", session="${sessionId.replace(/["\\]/g, '')}"}`,
      start: `${BigInt(startMs) * 1_000_000n}`,
      end: `${BigInt(endMs) * 1_000_000n}`,
      limit: String(QUERY_LIMIT),
      direction: 'forward',
    })
    try {
      const res = await fetch(`${this.url}/loki/api/v1/query_range?${params}`, { signal: AbortSignal.timeout(TIMEOUT_MS) })
      if (!res.ok) return null
      const body = (await res.json()) as { status?: string; data?: { resultType?: string; result?: { values?: [string, string][] }[] } }
      if (body.status !== 'success' || body.data?.resultType !== 'streams') return null
      const values = (body.data.result ?? []).flatMap((stream) => stream.values ?? [])
      return values.sort((a, b) => (BigInt(a[0]) < BigInt(b[0]) ? -1 : 1)).map(([ns, line]) => ({ at: Number(BigInt(ns) / 1_000_000n), line }))
    } catch {
      return null
    }
  }
}
