import type { Database } from 'bun:sqlite'
import type { Masker, SecretMasks } from './masks'
import { DataVersion } from '../db/data-version'

/** An event as stored and streamed: `seq` is its SSE id, unique and increasing per session. */
/** Stored log text per session, turn and writer is capped; the oldest lines go first when it is read. */
export const LOG_CAP_BYTES = 1024 * 1024

export interface StoredEvent {
  seq: number
  turn: number
  kind: 'status' | 'harness' | 'log'
  type: string
  data: Record<string, unknown>
  createdAt: number
  /** `data` as JSON, made once and shared by the row and every stream frame. */
  json?: string
}

/** An event to append; `json` is its data's JSON when the caller made it already. */
export type NewEvent = Omit<StoredEvent, 'seq' | 'createdAt'>

/** What is stored of one turn's output (EventLog.storedOfTurn). */
export interface StoredTurn {
  harness: number
  raw: number
  /** Log text by writer: the CLI's stderr, agentd's own lines. */
  log: Record<'stderr' | 'agentd', { chars: number; truncated: boolean }>
}

/** A live reader of one session's events. Returns false when it cannot keep up (it is dropped). */
export type Listener = (events: StoredEvent[]) => boolean

interface Pending {
  sessionId: string
  events: StoredEvent[]
  rawLines: { turn: number; line: string }[]
}

export interface EventLogOptions {
  /** How long an appended event may wait for its batch; one transaction per batch. */
  flushMs?: number
  /** Buffered events that make a batch go without waiting for flushMs. */
  batchSize?: number
  now?: () => number
  /** Secret values masked in what a session stores (events, raw lines), as they enter the log. */
  masks?: SecretMasks
  /**
   * Events are written by another process (a replica of a region: LiteFS applies the primary's
   * transactions): listeners are handed what each commit brought (looked for every FOLLOW_COMMITS_MS).
   */
  followCommits?: boolean
}

/** How often a replica looks for the primary's commits for its event streams (a data_version read: microseconds). */
const FOLLOW_COMMITS_MS = 25

/**
 * Session events, group-committed: appends are buffered and written in one transaction per
 * short batch, and listeners see an event only after its batch is durable. Status events written
 * by a transition go through `inTransaction`, in the transition's own transaction, after whatever
 * was buffered, so a session's events stay in seq order on disk and on the wire.
 */
export class EventLog {
  private readonly seqs = new Map<string, number>()
  private readonly lineNos = new Map<string, number>()
  private readonly pending = new Map<string, Pending>()
  private readonly listeners = new Map<string, Set<Listener>>()
  /** Following another process's commits: the last seq handed to each subscribed session's listeners. */
  private readonly followed = new Map<string, number>()
  private readonly followsCommits: boolean
  private following: ReturnType<typeof setInterval> | null = null
  private timer: ReturnType<typeof setTimeout> | null = null
  private buffered = 0
  private soon = false
  private readonly flushMs: number
  private readonly batchSize: number
  private readonly now: () => number
  private readonly masks: SecretMasks | null
  /** Transactions written by `flush` (for the events benchmark). */
  transactions = 0
  /** Events written since the start (for /metrics). */
  written = 0

  private readonly insertEvent
  private readonly insertLine
  private readonly maxSeq
  private readonly maxLine
  private readonly selectAfter

  constructor(
    private readonly sqlite: Database,
    options: EventLogOptions = {},
  ) {
    this.flushMs = options.flushMs ?? 10
    this.batchSize = options.batchSize ?? 200
    this.now = options.now ?? Date.now
    this.masks = options.masks ?? null
    this.followsCommits = options.followCommits === true
    this.insertEvent = sqlite.prepare(
      'INSERT INTO session_events (session_id, seq, turn, kind, type, data, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)',
    )
    this.insertLine = sqlite.prepare('INSERT INTO session_transcript_lines (session_id, line_no, turn, line) VALUES (?, ?, ?, ?)')
    this.maxSeq = sqlite.prepare<{ seq: number | null }, [string]>('SELECT max(seq) AS seq FROM session_events WHERE session_id = ?')
    this.maxLine = sqlite.prepare<{ n: number | null }, [string]>(
      'SELECT max(line_no) AS n FROM session_transcript_lines WHERE session_id = ?',
    )
    this.selectAfter = sqlite.prepare<
      { seq: number; turn: number; kind: StoredEvent['kind']; type: string; data: string; created_at: number },
      [string, number, string]
    >('SELECT seq, turn, kind, type, data, created_at FROM session_events WHERE session_id = ? AND seq > ? AND kind != ? ORDER BY seq')
    if (this.followsCommits) this.followCommits()
  }

  /**
   * Hands listeners the events another process committed (the connection's DataVersion moves with
   * each commit not made on it), so a stream opened here follows a session run elsewhere.
   */
  private followCommits(): void {
    const version = DataVersion.of(this.sqlite)
    let seen = version.read()
    this.following = setInterval(() => {
      if (this.followed.size === 0) return
      const now = version.read()
      if (now === seen) return
      seen = now
      for (const [sessionId, after] of this.followed) {
        const events = this.replay(sessionId, after)
        if (events.length === 0) continue
        this.followed.set(sessionId, events.at(-1)!.seq)
        this.publish(sessionId, events)
      }
    }, FOLLOW_COMMITS_MS)
    this.following.unref()
  }

  /** Stops following another process's commits (before the database closes). */
  close(): void {
    if (this.following) clearInterval(this.following)
    this.following = null
  }

  private nextSeq(sessionId: string): number {
    let seq = this.seqs.get(sessionId)
    if (seq === undefined) seq = this.maxSeq.get(sessionId)?.seq ?? 0
    this.seqs.set(sessionId, ++seq)
    return seq
  }

  private nextLine(sessionId: string): number {
    let n = this.lineNos.get(sessionId)
    if (n === undefined) n = this.maxLine.get(sessionId)?.n ?? 0
    this.lineNos.set(sessionId, ++n)
    return n
  }

  /** Buffers a harness batch (normalized events and the raw lines they came from). */
  append(sessionId: string, events: NewEvent[], rawLines: { turn: number; line: string }[] = []): void {
    if (events.length === 0 && rawLines.length === 0) return
    let pending = this.pending.get(sessionId)
    if (!pending) {
      pending = { sessionId, events: [], rawLines: [] }
      this.pending.set(sessionId, pending)
    }
    const createdAt = this.now()
    const masker = this.masks?.of(sessionId)
    for (const event of events)
      pending.events.push({ ...(masker ? maskedEvent(event, masker) : event), seq: this.nextSeq(sessionId), createdAt })
    if (masker) for (const raw of rawLines) pending.rawLines.push({ turn: raw.turn, line: masker.maskLine(raw.line) })
    else pending.rawLines.push(...rawLines)
    this.buffered += events.length + rawLines.length
    // A full batch goes at once; a trickle waits at most flushMs. Under load that is about one
    // transaction per `batchSize` events, which is what replicated SQLite sustains.
    if (this.buffered >= this.batchSize && !this.soon) {
      if (this.timer) clearTimeout(this.timer)
      this.soon = true
      this.timer = setTimeout(() => this.flush(), 0)
    } else this.timer ??= setTimeout(() => this.flush(), this.flushMs)
  }

  /** Writes every buffered batch in one transaction, then hands the events to listeners. */
  flush(): void {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    this.soon = false
    if (this.pending.size === 0) return
    const batches = [...this.pending.values()]
    this.pending.clear()
    this.buffered = 0
    this.sqlite.transaction(() => this.write(batches))()
    this.transactions++
    for (const batch of batches) this.publish(batch.sessionId, batch.events)
  }

  /**
   * For a transition's own transaction: writes what is buffered plus `events`, and returns the
   * publish step to run after the commit.
   */
  inTransaction(sessionId: string, events: NewEvent[]): () => void {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    this.soon = false
    const batches = [...this.pending.values()]
    this.pending.clear()
    this.buffered = 0
    const createdAt = this.now()
    const masker = this.masks?.of(sessionId)
    const own: Pending = {
      sessionId,
      events: events.map((e) => ({ ...(masker ? maskedEvent(e, masker) : e), seq: this.nextSeq(sessionId), createdAt })),
      rawLines: [],
    }
    this.write([...batches, own])
    return () => {
      for (const batch of batches) this.publish(batch.sessionId, batch.events)
      this.publish(sessionId, own.events)
    }
  }

  private write(batches: Pending[]): void {
    for (const batch of batches) {
      this.written += batch.events.length
      for (const e of batch.events) {
        e.json ??= JSON.stringify(e.data)
        this.insertEvent.run(batch.sessionId, e.seq, e.turn, e.kind, e.type, e.json, e.createdAt)
      }
      for (const { turn, line } of batch.rawLines) this.insertLine.run(batch.sessionId, this.nextLine(batch.sessionId), turn, line)
    }
  }

  private publish(sessionId: string, events: StoredEvent[]): void {
    const listeners = this.listeners.get(sessionId)
    if (!listeners || events.length === 0) return
    const visible = events.filter((e) => e.kind !== 'log')
    if (visible.length === 0) return
    for (const listener of listeners) if (!listener(visible)) listeners.delete(listener)
  }

  /** Whether a durable event (logs excluded) follows `afterSeq`. */
  hasAfter(sessionId: string, afterSeq: number): boolean {
    return (
      this.sqlite
        .query("SELECT 1 FROM session_events WHERE session_id = ? AND seq > ? AND kind != 'log' LIMIT 1")
        .get(sessionId, afterSeq) !== null
    )
  }

  /** Durable events after `afterSeq`, logs excluded. */
  replay(sessionId: string, afterSeq: number): StoredEvent[] {
    return this.selectAfter.all(sessionId, afterSeq, 'log').map((row) => ({
      seq: row.seq,
      turn: row.turn,
      kind: row.kind,
      type: row.type,
      data: JSON.parse(row.data) as Record<string, unknown>,
      json: row.data,
      createdAt: row.created_at,
    }))
  }

  /**
   * What is stored of one turn's output, buffered appends included: its harness events, its raw
   * lines and the characters of each log writer (and whether it reached its cap). A turn taken
   * over after a restart reads its output again from the start and skips this much.
   */
  storedOfTurn(sessionId: string, turn: number): StoredTurn {
    if (this.pending.has(sessionId)) this.flush()
    const count = (sql: string) => this.sqlite.query<{ n: number }, [string, number]>(sql).get(sessionId, turn)?.n ?? 0
    const stored: StoredTurn = {
      harness: count("SELECT count(*) AS n FROM session_events WHERE session_id = ? AND turn = ? AND kind = 'harness'"),
      raw: count('SELECT count(*) AS n FROM session_transcript_lines WHERE session_id = ? AND turn = ?'),
      log: { stderr: { chars: 0, truncated: false }, agentd: { chars: 0, truncated: false } },
    }
    const logs = this.sqlite.query<{ type: string; data: string }, [string, number]>(
      "SELECT type, data FROM session_events WHERE session_id = ? AND turn = ? AND kind = 'log'",
    )
    for (const row of logs.all(sessionId, turn)) {
      const writer = stored.log[row.type as keyof StoredTurn['log']]
      if (!writer) continue
      const data = JSON.parse(row.data) as { text?: unknown; truncated?: unknown }
      if (typeof data.text === 'string') writer.chars += data.text.length
      if (data.truncated === true) writer.truncated = true
    }
    return stored
  }

  /** Live events of a session from now on; call the returned function to stop. */
  subscribe(sessionId: string, listener: Listener): () => void {
    let set = this.listeners.get(sessionId)
    if (!set) {
      set = new Set()
      this.listeners.set(sessionId, set)
      if (this.followsCommits) this.followed.set(sessionId, this.maxSeq.get(sessionId)?.seq ?? 0)
    }
    set.add(listener)
    return () => {
      set.delete(listener)
      if (set.size === 0 && this.listeners.get(sessionId) === set) {
        this.listeners.delete(sessionId)
        this.followed.delete(sessionId)
      }
    }
  }

  /** Drops per-session counters once a session is no longer live. */
  forget(sessionId: string): void {
    // Buffered events were numbered from these counters: write them before the counters go.
    if (this.pending.has(sessionId)) this.flush()
    this.seqs.delete(sessionId)
    this.lineNos.delete(sessionId)
  }
}

/** `event` with its data's secret values masked; its JSON made once here and kept for the row and the stream. */
function maskedEvent(event: NewEvent, masker: Masker): NewEvent {
  const data = masker.maskJson(event.data)
  return data === event.data ? event : { ...event, data, json: JSON.stringify(data) }
}
