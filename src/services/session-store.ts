import { and, asc, desc, eq, inArray, max, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { sessionEvents, sessions, sessionSnapshots, sessionTranscriptLines } from '../db/schema'
import type { SessionStatus } from '../domain/status'

export type SessionRow = typeof sessions.$inferSelect
export type SessionInsert = typeof sessions.$inferInsert
export type SessionPatch = Partial<Omit<SessionInsert, 'id' | 'status'>>

export interface NewEvent {
  turn: number
  kind: 'status' | 'harness' | 'log'
  type: string
  data: Record<string, unknown>
}

export class VersionConflict extends Error {}

/** SQLite access for sessions, their snapshots and their events. Every method is synchronous. */
export class SessionStore {
  private readonly seqs = new Map<string, number>()
  private readonly lineNos = new Map<string, number>()

  constructor(
    private readonly db: Db,
    private readonly now: () => number,
  ) {}

  transaction<T>(fn: () => T): T {
    return this.db.transaction(() => fn())
  }

  insert(row: SessionInsert, snapshot: unknown, machineVersion: number, events: NewEvent[]): void {
    this.db.transaction(() => {
      this.db.insert(sessions).values(row).run()
      this.db.insert(sessionSnapshots).values({ sessionId: row.id, machineVersion, snapshot, version: 1 }).run()
      this.appendEventsRaw(row.id, events)
    })
  }

  get(id: string): SessionRow | null {
    return this.db.select().from(sessions).where(eq(sessions.id, id)).get() ?? null
  }

  snapshotOf(id: string): { snapshot: unknown; version: number; machineVersion: number } | null {
    return this.db.select().from(sessionSnapshots).where(eq(sessionSnapshots.sessionId, id)).get() ?? null
  }

  /**
   * Writes a transition: snapshot (optimistically locked on `version`), the derived status, any
   * field patch and event rows, all in one transaction.
   */
  commit(id: string, version: number, snapshot: unknown, status: SessionStatus, patch: SessionPatch, events: NewEvent[]): void {
    this.db.transaction(() => {
      const updated = this.db
        .update(sessionSnapshots)
        .set({ snapshot, version: version + 1 })
        .where(and(eq(sessionSnapshots.sessionId, id), eq(sessionSnapshots.version, version)))
        .returning({ version: sessionSnapshots.version })
        .all()
      if (updated.length !== 1) throw new VersionConflict(`session ${id} changed under us`)
      this.db.update(sessions).set({ ...patch, status, updatedAt: this.now() }).where(eq(sessions.id, id)).run()
      this.appendEventsRaw(id, events)
    })
  }

  update(id: string, patch: SessionPatch): void {
    this.db.update(sessions).set({ ...patch, updatedAt: this.now() }).where(eq(sessions.id, id)).run()
  }

  /** Normalized events and the raw lines they came from, in one transaction. */
  appendOutput(id: string, turn: number, events: NewEvent[], rawLines: string[]): void {
    if (events.length === 0 && rawLines.length === 0) return
    this.db.transaction(() => {
      this.appendEventsRaw(id, events)
      if (rawLines.length === 0) return
      let lineNo = this.lineNos.get(id)
      if (lineNo === undefined) {
        const row = this.db
          .select({ n: max(sessionTranscriptLines.lineNo) })
          .from(sessionTranscriptLines)
          .where(eq(sessionTranscriptLines.sessionId, id))
          .get()
        lineNo = row?.n ?? 0
      }
      this.db
        .insert(sessionTranscriptLines)
        .values(rawLines.map((line) => ({ sessionId: id, lineNo: ++lineNo!, turn, line })))
        .run()
      this.lineNos.set(id, lineNo)
    })
  }

  /** Drops per-session counters once a session is no longer live. */
  forget(id: string): void {
    this.seqs.delete(id)
    this.lineNos.delete(id)
  }

  private appendEventsRaw(id: string, events: NewEvent[]): void {
    if (events.length === 0) return
    let seq = this.seqs.get(id)
    if (seq === undefined) {
      const row = this.db.select({ seq: max(sessionEvents.seq) }).from(sessionEvents).where(eq(sessionEvents.sessionId, id)).get()
      seq = row?.seq ?? 0
    }
    const createdAt = this.now()
    const rows = events.map((e) => ({ sessionId: id, seq: ++seq!, turn: e.turn, kind: e.kind, type: e.type, data: e.data, createdAt }))
    this.db.insert(sessionEvents).values(rows).run()
    this.seqs.set(id, seq)
  }

  events(id: string) {
    return this.db.select().from(sessionEvents).where(eq(sessionEvents.sessionId, id)).orderBy(asc(sessionEvents.seq)).all()
  }

  /** Sessions in these states, oldest first. */
  inStatus(statuses: SessionStatus[], orgId?: string): SessionRow[] {
    const where = orgId ? and(inArray(sessions.status, statuses), eq(sessions.orgId, orgId)) : inArray(sessions.status, statuses)
    return this.db.select().from(sessions).where(where).orderBy(asc(sessions.createdAt), asc(sessions.id)).all()
  }

  countInStatus(orgId: string, statuses: SessionStatus[]): number {
    const row = this.db
      .select({ n: sql<number>`count(*)` })
      .from(sessions)
      .where(and(eq(sessions.orgId, orgId), inArray(sessions.status, statuses)))
      .get()
    return row?.n ?? 0
  }

  list(filter: { orgId: string; projectId?: string; status?: SessionStatus; limit: number }): SessionRow[] {
    const conditions = [eq(sessions.orgId, filter.orgId)]
    if (filter.projectId) conditions.push(eq(sessions.projectId, filter.projectId))
    if (filter.status) conditions.push(eq(sessions.status, filter.status))
    return this.db
      .select()
      .from(sessions)
      .where(and(...conditions))
      .orderBy(desc(sessions.createdAt), desc(sessions.id))
      .limit(filter.limit)
      .all()
  }
}
