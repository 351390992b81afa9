import { and, asc, desc, eq, inArray, lt, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { artifacts, projects, sessionEvents, users } from '../db/schema'
import type { Harness } from '../domain/harness'
import { EMBEDDED_ARTIFACTS } from '../runtime/artifacts'
import type { SessionRow } from '../session-record/store'
import type { StartedBy } from '../domain/api-schemas'
import { iso } from '../domain/values'

/** ArtifactFile (spec 2.3). */
export interface ArtifactPreview {
  name: string
  size: number
  content_type: string
}

/** What a search row shows beyond the sessions columns, loaded once per page. */
interface RowExtras {
  project: string | null
  startedBy: StartedBy | null
  messageCount: number
  summary: string | null
  artifacts: ArtifactPreview[]
}

/** Session, the org-wide search row (spec 2.4). */
export function searchSession(row: SessionRow, extras: RowExtras) {
  return {
    id: row.id,
    kind: row.kind,
    short_id: row.id.slice(0, 8),
    title: row.title,
    project: extras.project,
    org_id: row.orgId,
    project_id: row.projectId,
    agent: row.agent,
    harness: row.harness as Harness,
    harness_version_requested: row.harnessVersionRequested,
    harness_version_resolved: row.harnessVersionResolved,
    model: row.model,
    mode: row.mode,
    status: row.status,
    prompt: row.prompt,
    branch: row.branch,
    pr_url: row.prUrl,
    error: row.error,
    session_capture: row.sessionCapture,
    message_count: extras.messageCount,
    input_tokens: row.inputTokens ?? 0,
    output_tokens: row.outputTokens ?? 0,
    cache_read_tokens: row.cacheReadTokens ?? 0,
    cache_write_tokens: row.cacheWriteTokens ?? 0,
    tool_call_count: row.toolCallsCount ?? 0,
    artifact_count: row.artifactCount,
    cost_usd: row.totalCostUsd ?? 0,
    duration_ms: row.completedAt === null ? null : row.completedAt - row.createdAt,
    started_by: extras.startedBy,
    summary: extras.summary,
    artifacts: extras.artifacts,
    agent_profile: null,
    ...(row.forkedFromSession !== null ? { forked_from: { session: row.forkedFromSession, turn: row.forkedFromTurn ?? 0 } } : {}),
    created_at: iso(row.createdAt)!,
    updated_at: iso(row.updatedAt),
  }
}

/**
 * Turns a page of session rows into search rows with a fixed number of queries per page (not per
 * row): Project names, who started them, and artifact previews. Only a session without a stored
 * summary (a first turn still running) costs one more query, for its latest assistant text.
 */
export class SearchRows {
  constructor(private readonly db: Db) {}

  sessions(rows: (SessionRow & { messageCount: number })[]) {
    if (rows.length === 0) return []
    const projectNames = this.projectNames(rows)
    const startedBy = this.startedBy(rows)
    const artifacts = this.artifacts(rows)
    return rows.map((row) =>
      searchSession(row, {
        project: row.projectId ? (projectNames.get(row.projectId) ?? null) : null,
        startedBy: row.startedByUserId ? (startedBy.get(row.startedByUserId) ?? null) : null,
        messageCount: row.messageCount,
        summary: row.summary?.slice(0, 200) ?? this.lastAssistantLine(row.id),
        artifacts: artifacts.get(row.id) ?? [],
      }),
    )
  }

  /** The first 6 artifacts of each session, in upload order. The one place that reads artifacts for search rows. */
  private artifacts(rows: SessionRow[]): Map<string, ArtifactPreview[]> {
    const ids = rows.filter((row) => row.artifactCount > 0).map((row) => row.id)
    const out = new Map<string, ArtifactPreview[]>()
    if (ids.length === 0) return out
    const found = this.db
      .select({ sessionId: artifacts.sessionId, name: artifacts.name, size: artifacts.size, content_type: artifacts.contentType })
      .from(artifacts)
      .where(and(inArray(artifacts.sessionId, ids), lt(artifacts.ordinal, EMBEDDED_ARTIFACTS)))
      .orderBy(asc(artifacts.sessionId), asc(artifacts.ordinal))
      .all()
    for (const { sessionId, ...preview } of found) out.set(sessionId, [...(out.get(sessionId) ?? []), preview])
    return out
  }

  private projectNames(rows: SessionRow[]): Map<string, string> {
    const ids = [...new Set(rows.flatMap((row) => (row.projectId ? [row.projectId] : [])))]
    if (ids.length === 0) return new Map()
    const found = this.db.select({ id: projects.id, name: projects.name }).from(projects).where(inArray(projects.id, ids)).all()
    return new Map(found.map((p) => [p.id, p.name]))
  }

  private startedBy(rows: SessionRow[]): Map<string, StartedBy> {
    const ids = [...new Set(rows.flatMap((row) => (row.startedByUserId ? [row.startedByUserId] : [])))]
    if (ids.length === 0) return new Map()
    const found = this.db
      .select({ id: users.id, name: users.name, avatarUrl: users.avatarUrl })
      .from(users)
      .where(inArray(users.id, ids))
      .all()
    return new Map(found.map((u) => [u.id, { name: u.name, avatar_url: u.avatarUrl }]))
  }

  /** Before a turn stores its summary: the last line of the latest assistant text, if any was captured. */
  private lastAssistantLine(id: string): string | null {
    const events = this.db
      .select({ data: sessionEvents.data })
      .from(sessionEvents)
      .where(
        and(
          eq(sessionEvents.sessionId, id),
          eq(sessionEvents.kind, 'harness'),
          eq(sessionEvents.type, 'message'),
          sql`${sessionEvents.data} ->> '$.role' = 'assistant'`,
        ),
      )
      .orderBy(desc(sessionEvents.seq))
      .limit(10)
      .all()
    for (const { data } of events) {
      if (typeof data.content !== 'string') continue
      const line = data.content
        .split('\n')
        .map((l) => l.trim())
        .findLast(Boolean)
      if (line) return line.slice(0, 200)
    }
    return null
  }
}
