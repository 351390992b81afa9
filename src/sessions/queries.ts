import { statusIn } from '../domain/status'
import { eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { DataCache, DataVersion } from '../db/data-version'
import { users } from '../db/schema'
import { notFound } from '../domain/errors'
import type { SessionStatus } from '../domain/status'
import { LookupCache } from '../db/lookup-cache'
import { findProject, NO_PROJECT } from '../identity/projects'
import type { OrgAccess } from '../identity/service'
import { EMBEDDED_ARTIFACTS, type ArtifactStore } from '../runtime/artifacts'
import type { SessionSearch } from '../search/service'
import type { FileService } from '../files/service'
import type { AdmissionQueue } from './admission'
import type { SessionStore, SessionRow } from '../session-record/store'
import { followSession, type StreamRecheck } from './stream'
import { answerOf, outputLine } from '../session-record/answer'
import { cloudRunSession, sessionResult } from './view'

/** Session views kept for repeated reads of unchanged sessions. */
const VIEW_CACHE_SIZE = 1000

export interface SessionQueriesDeps {
  db: Db
  store: SessionStore
  search: SessionSearch
  artifacts: ArtifactStore
  files: FileService
  /** Where queued sessions stand (their `queue_position`). */
  queue: AdmissionQueue
  now: () => number
}

/**
 * The read side of sessions: one session, a Project's list, the result, the live event stream,
 * and artifacts, each under the same access rule (the caller's org, and a Project reference
 * that is `_` or the session's own Project; anything else is 404).
 */
export class SessionQueries {
  private readonly userById
  /** Kept until the row is written (the store calls `forget`) or another connection commits. */
  private readonly views: DataCache<{ row: SessionRow; view: ReturnType<typeof cloudRunSession> }>
  private readonly startedBy: LookupCache<{ name: string | null; avatarUrl: string | null } | null>

  constructor(private readonly deps: SessionQueriesDeps) {
    this.startedBy = new LookupCache(deps.db.$client, deps.now)
    this.userById = deps.db
      .select({ name: users.name, avatarUrl: users.avatarUrl })
      .from(users)
      .where(eq(users.id, sql.placeholder('id')))
      .prepare()
    this.views = new DataCache(DataVersion.of(deps.db.$client), VIEW_CACHE_SIZE)
  }

  /** Drops the cached view of a session whose row was just written. */
  forget(id: string): void {
    this.views.delete(id)
  }

  /** A session the caller may read, or 404. */
  find(access: OrgAccess, projectRef: string, id: string): SessionRow {
    const row = this.deps.store.get(id)
    if (!row) throw notFound('Session not found')
    this.assertReadable(access, projectRef, row)
    return row
  }

  /**
   * One session (spec 4.1). Polled hard by clients, so the view of an unchanged session is reused
   * (every write of the row goes through the store's `insert` or `commit`, which drop it).
   */
  get(access: OrgAccess, projectRef: string, id: string) {
    const hit = this.views.get(id)
    if (hit) {
      this.assertReadable(access, projectRef, hit.row)
      // A queued session's place moves as others are started, without a write of its own row.
      return hit.row.status === 'queued' ? this.view(hit.row) : hit.view
    }
    const row = this.find(access, projectRef, id)
    const view = this.view(row)
    this.views.set(id, { row, view })
    return view
  }

  result(access: OrgAccess, projectRef: string, id: string) {
    return sessionResult(this.find(access, projectRef, id))
  }

  list(access: OrgAccess, projectRef: string, query: { status?: SessionStatus; limit?: number }) {
    let projectId: string | undefined
    if (projectRef !== NO_PROJECT) {
      const project = findProject(this.deps.db, access.orgId, projectRef)
      if (!project) throw notFound('Project not found')
      projectId = project.id
    }
    const rows = this.deps.search.rows({ orgId: access.orgId, projectId, status: query.status }, { limit: query.limit ?? 50 })
    const positions = rows.some((row) => row.status === 'queued') ? this.queuePositions() : undefined
    return { executions: rows.map((row) => this.view(row, positions)) }
  }

  /**
   * Follows a session's events live (spec 6.1; the route frames them, sse.ts): its event stream
   * after `afterSeq`; or, for a resumed stream of a session at rest with nothing after its cursor,
   * where it ended (what its `done` event said), as there is nothing to stream.
   */
  eventStream(access: OrgAccess, projectRef: string, id: string, afterSeq: number, keepaliveMs: number, recheck?: StreamRecheck) {
    const row = this.find(access, projectRef, id)
    if (afterSeq > 0 && statusIn('resting', row.status) && !this.deps.store.events.hasAfter(row.id, afterSeq))
      return { rested: { status: row.status, output: outputLine(row), result: answerOf(row) } }
    return { follow: followSession(this.deps.store, row.id, { afterSeq, keepaliveMs, recheck }) }
  }

  artifactList(access: OrgAccess, projectRef: string, id: string) {
    const row = this.find(access, projectRef, id)
    return { execution_id: row.id, artifacts: this.deps.artifacts.list(row.id) }
  }

  artifact(access: OrgAccess, projectRef: string, id: string, name: string) {
    const found = this.deps.artifacts.read(this.find(access, projectRef, id).id, name)
    if (!found) throw notFound(`No artifact named "${name}"`)
    return found
  }

  /** The CloudRunSession view of a row (spec 2.4), with who started it and its first artifacts. */
  view(row: SessionRow, positions?: Map<string, number>) {
    const userId = row.startedByUserId
    const user = userId ? this.startedBy.get(userId, () => this.userById.get({ id: userId }) ?? null) : null
    const firstArtifacts = row.artifactCount > 0 ? this.deps.artifacts.list(row.id, EMBEDDED_ARTIFACTS) : []
    const position = row.status === 'queued' ? ((positions ?? this.queuePositions()).get(row.id) ?? null) : null
    return cloudRunSession(
      row,
      user ? { name: user.name, avatar_url: user.avatarUrl } : null,
      firstArtifacts,
      position,
      this.deps.files.attachmentsOf(row.id),
    )
  }

  /** Every queued session's place in the host's admission order. */
  private queuePositions(): Map<string, number> {
    return this.deps.queue.positions(this.deps.store.inStatus(['queued']))
  }

  /** Another org's session, or one outside the named Project, is answered as not found. */
  private assertReadable(access: OrgAccess, projectRef: string, row: SessionRow): void {
    if (row.orgId !== access.orgId) throw notFound('Session not found')
    if (projectRef !== NO_PROJECT) {
      const project = findProject(this.deps.db, access.orgId, projectRef)
      if (!project || project.id !== row.projectId) throw notFound('Session not found')
    }
  }
}
