import { and, asc, eq, getTableColumns, inArray, lte, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { sessionEvents, sessionMessages, sessions, sessionSnapshots, sessionTranscriptLines } from '../db/schema'
import type { SessionStatus } from '../domain/status'
import { EventLog, type NewEvent } from './event-log'
import type { SecretMasks } from './masks'

export type SessionRow = typeof sessions.$inferSelect
export type SessionInsert = typeof sessions.$inferInsert
export type SessionPatch = Partial<Omit<SessionInsert, 'id' | 'status'>>
export type MessageRow = typeof sessionMessages.$inferSelect
export type { NewEvent }

export class VersionConflict extends Error {}

/** SQLite access for sessions, their snapshots, events and messages. Every method is synchronous. */
export class SessionStore {
  readonly events: EventLog
  // Prepared once: every session route reads the row.
  private readonly byId
  private readonly mapRow: (raw: Record<string, unknown>) => SessionRow
  constructor(
    private readonly db: Db,
    private readonly now: () => number,
    /** Told after each write of a session's row, so caches of it can drop their copy. */
    private readonly written: (id: string) => void = () => {},
    /** Secret values masked in everything stored about a session (see masks.ts). */
    readonly masks?: SecretMasks,
    /** A replica of a region: its events come from the primary's commits (EventLogOptions.followCommits). */
    followCommits = false,
  ) {
    this.events = new EventLog(db.$client, { now, ...(masks ? { masks } : {}), followCommits })
    // The hottest read of all, so plain bun:sqlite and a mapper built once from the table's
    // columns: drizzle's per-call query machinery cost more than the query itself.
    this.byId = db.$client.prepare<Record<string, unknown>, [string]>('SELECT * FROM sessions WHERE id = ?')
    const columns = Object.entries(getTableColumns(sessions)).map(([key, column]) => ({ key, name: column.name, column }))
    this.mapRow = (raw) => {
      const row: Record<string, unknown> = {}
      for (const { key, name, column } of columns) {
        const value = raw[name]
        row[key] = value === null || value === undefined ? null : column.mapFromDriverValue(value)
      }
      return row as SessionRow
    }
  }

  insert(row: SessionInsert, snapshot: unknown, machineVersion: number, events: NewEvent[], writes: () => void = () => {}): void {
    const publish = this.db.transaction(() => {
      this.db.insert(sessions).values(row).run()
      this.db.insert(sessionSnapshots).values({ sessionId: row.id, machineVersion, snapshot, version: 1 }).run()
      writes()
      return this.events.inTransaction(row.id, events)
    })
    publish()
    this.written(row.id)
  }

  get(id: string): SessionRow | null {
    const raw = this.byId.get(id)
    return raw ? this.mapRow(raw) : null
  }

  snapshotOf(id: string): { snapshot: unknown; version: number; machineVersion: number } | null {
    return this.db.select().from(sessionSnapshots).where(eq(sessionSnapshots.sessionId, id)).get() ?? null
  }

  /**
   * Writes a transition: snapshot (optimistically locked on `version`), the derived status, any
   * field patch, event rows and the transition's own writes, all in one transaction. Listeners
   * see the events once it committed.
   */
  commit(
    id: string,
    version: number,
    snapshot: unknown,
    status: SessionStatus,
    patch: SessionPatch,
    events: NewEvent[],
    writes: () => void = () => {},
  ): void {
    const publish = this.db.transaction(() => {
      const updated = this.db
        .update(sessionSnapshots)
        .set({ snapshot, version: version + 1 })
        .where(and(eq(sessionSnapshots.sessionId, id), eq(sessionSnapshots.version, version)))
        .returning({ version: sessionSnapshots.version })
        .all()
      if (updated.length !== 1) throw new VersionConflict(`session ${id} changed under us`)
      this.db
        .update(sessions)
        .set({ ...this.masked(id, patch), status, updatedAt: this.now() })
        .where(eq(sessions.id, id))
        .run()
      writes()
      return this.events.inTransaction(id, events)
    })
    try {
      publish()
    } finally {
      this.written(id)
    }
  }

  /** `patch` with the session's secret values masked in its texts (result, summary, error, …). */
  private masked(id: string, patch: SessionPatch): SessionPatch {
    const masker = this.masks?.of(id)
    if (!masker) return patch
    const out: Record<string, unknown> = {}
    for (const [key, value] of Object.entries(patch))
      out[key] =
        typeof value === 'string' ? masker.mask(value) : value !== null && typeof value === 'object' ? masker.maskJson(value) : value
    return out as SessionPatch
  }

  /** Every stored event of a session, logs included, in order. */
  allEvents(id: string) {
    return this.db.select().from(sessionEvents).where(eq(sessionEvents.sessionId, id)).orderBy(asc(sessionEvents.seq)).all()
  }

  /** The harness's raw stdout lines, in order (the trajectory as the CLI wrote it). */
  transcriptLines(id: string): { turn: number; line: string }[] {
    return this.db
      .select({ turn: sessionTranscriptLines.turn, line: sessionTranscriptLines.line })
      .from(sessionTranscriptLines)
      .where(eq(sessionTranscriptLines.sessionId, id))
      .orderBy(asc(sessionTranscriptLines.lineNo))
      .all()
  }

  /** Sessions in these states, oldest first. */
  inStatus(statuses: readonly SessionStatus[], orgId?: string): SessionRow[] {
    const where = orgId ? and(inArray(sessions.status, statuses), eq(sessions.orgId, orgId)) : inArray(sessions.status, statuses)
    return this.db.select().from(sessions).where(where).orderBy(asc(sessions.createdAt), asc(sessions.id)).all()
  }

  /** Resumable sessions in these states untouched since `cutoff`: the sweeper reads only these. */
  idleSince(statuses: readonly SessionStatus[], cutoff: number): string[] {
    return this.db
      .select({ id: sessions.id })
      .from(sessions)
      .where(and(inArray(sessions.status, statuses), eq(sessions.persistenceMode, 'resumable'), lte(sessions.updatedAt, cutoff)))
      .all()
      .map((row) => row.id)
  }

  /** How many sessions of every org are in each status (for /metrics). */
  countByStatus(): Map<SessionStatus, number> {
    const rows = this.db.select({ status: sessions.status, n: sql<number>`count(*)` }).from(sessions).groupBy(sessions.status).all()
    return new Map(rows.map((row) => [row.status as SessionStatus, row.n]))
  }

  /** Sessions of every org in these statuses (the host's sandboxes in use). */
  countAll(statuses: readonly SessionStatus[]): number {
    const row = this.db.select({ n: sql<number>`count(*)` }).from(sessions).where(inArray(sessions.status, statuses)).get()
    return row?.n ?? 0
  }

  countInStatus(orgId: string, statuses: readonly SessionStatus[]): number {
    const row = this.db
      .select({ n: sql<number>`count(*)` })
      .from(sessions)
      .where(and(eq(sessions.orgId, orgId), inArray(sessions.status, statuses)))
      .get()
    return row?.n ?? 0
  }

  // Follow-up messages. These run inside a transition's transaction (`commit`'s `writes`).

  insertMessage(sessionId: string, id: string, content: string, status: 'queued' | 'delivered', turn: number | null): void {
    const seq =
      (this.db.select({ n: sql<number>`coalesce(max(seq), 0)` }).from(sessionMessages).where(eq(sessionMessages.sessionId, sessionId)).get()
        ?.n ?? 0) + 1
    this.db
      .insert(sessionMessages)
      .values({ id, sessionId, seq, content, status, turn, createdAt: this.now(), deliveredAt: status === 'delivered' ? this.now() : null })
      .run()
  }

  /** Marks the oldest queued message as the prompt of `turn`. */
  deliverOldest(sessionId: string, turn: number): void {
    const oldest = this.db
      .select({ id: sessionMessages.id })
      .from(sessionMessages)
      .where(and(eq(sessionMessages.sessionId, sessionId), eq(sessionMessages.status, 'queued')))
      .orderBy(asc(sessionMessages.seq))
      .get()
    if (!oldest) throw new Error(`session ${sessionId} has no queued message to deliver`)
    this.db
      .update(sessionMessages)
      .set({ status: 'delivered', turn, deliveredAt: this.now() })
      .where(eq(sessionMessages.id, oldest.id))
      .run()
  }

  dropQueued(sessionId: string): void {
    this.db
      .update(sessionMessages)
      .set({ status: 'dropped' })
      .where(and(eq(sessionMessages.sessionId, sessionId), eq(sessionMessages.status, 'queued')))
      .run()
  }

  /** The message that is the prompt of `turn` (turns after the first start with a follow-up). */
  messageForTurn(sessionId: string, turn: number): MessageRow | null {
    return (
      this.db
        .select()
        .from(sessionMessages)
        .where(and(eq(sessionMessages.sessionId, sessionId), eq(sessionMessages.turn, turn)))
        .get() ?? null
    )
  }

  forget(id: string): void {
    this.events.forget(id)
    this.masks?.forgetLater(id)
  }
}
