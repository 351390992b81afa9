import { and, desc, eq, getTableColumns, gte, lt, lte, or, sql, type SQL } from 'drizzle-orm'
import type { Db } from '../db/client'
import { sessions, sessionSearchDocs as docs } from '../db/schema'
import { ApiError, notFound } from '../domain/errors'
import type { SearchQuery } from './model'
import { decodeCursor, encodeCursor, ftsPhrase, parseTime, type Cursor, type SearchSort } from './query'
import type { RunMode, SessionStatus } from '../domain/status'
import type { OrgAccess } from '../identity/service'
import { findProject } from '../identity/projects'
import { SearchRows } from './rows'
import { docsMatchingAllSql, inOrg, RarestRuns } from './text'
import type { SessionRow } from '../session-record/store'

/** Which sessions to read. Only `orgId` is required; every other field narrows. */
export interface SessionFilter {
  orgId: string
  projectId?: string
  status?: SessionStatus
  agent?: string
  harness?: string
  mode?: RunMode
  model?: string
  repo?: { owner: string; name: string }
  /** Only the forks of this session. */
  forkedFrom?: string
  /** created_at >= since (epoch ms) */
  since?: number
  /** created_at < until (epoch ms) */
  until?: number
  /** FTS5 phrases; each must occur in the session's title, prompt or `message` events. */
  phrases?: string[]
}

export interface Page {
  sort?: SearchSort
  limit: number
  /** Only rows after this position in the sort order. */
  after?: Cursor
}

/** A session row with its search key (see src/db/schema/search.ts), the tie-breaker of every order, and its message count. */
export type KeyedRow = SessionRow & { key: number; messageCount: number }

/** Sort values besides `key`: nulls sort as 0 (cost) and last (duration), as the indexes of migration 0003 do. */
const SORT_VALUE: Record<Exclude<SearchSort, 'recent'>, { sql: SQL; of: (row: SessionRow) => number }> = {
  cost: { sql: sql`coalesce(${sessions.totalCostUsd}, 0)`, of: (row) => row.totalCostUsd ?? 0 },
  duration: {
    sql: sql`coalesce(${sessions.completedAt} - ${sessions.createdAt}, -1)`,
    of: (row) => (row.completedAt === null ? -1 : row.completedAt - row.createdAt),
  },
}

/** Sessions per millisecond in a key (the key is created_at * KEY_SPACING + creation order). */
const KEY_SPACING = 2048

/** At most this many candidates come with a 409 AMBIGUOUS_SELECTOR. */
const MAX_CANDIDATES = 20

const columns = { ...getTableColumns(sessions), key: docs.key, messageCount: docs.messageCount }

/**
 * The query layer over sessions: filters, full-text match, keyset pages, counts and selector
 * resolution. The org-wide search and the Project list both read through `rows()`.
 *
 * Every order ends in the session's search key, newest first, so a page boundary is a position,
 * not an offset: a session inserted while a client walks the pages gets a larger key (it sorts
 * before the walk's position under `recent`) and never shifts the rows still to come.
 */
export class SessionSearch {
  private readonly present: SearchRows

  constructor(
    private readonly db: Db,
    private readonly now: () => number,
  ) {
    this.present = new SearchRows(db)
  }

  /** `GET /o/{org}/sessions`: one Session with `selector`, else a SessionList page or a count. */
  search(access: OrgAccess, query: SearchQuery) {
    const filter = this.filterOf(access, query)
    if (query.selector !== undefined) return this.resolve(filter, query.selector)
    const sort = query.sort ?? 'recent'
    if (query.count) return { sessions: [], count: filter ? this.count(filter) : 0, next_cursor: null }
    const after = query.cursor === undefined ? undefined : decodeCursor(query.cursor, sort)
    const limit = query.limit ?? 50
    const rows = filter ? this.rows(filter, { sort, limit: limit + 1, after }) : []
    const page = rows.slice(0, limit)
    const last = page.at(-1)
    const next = rows.length > limit && last ? encodeCursor({ sort, value: sortValue(sort, last), key: last.key }) : null
    return { sessions: this.present.sessions(page), count: null, next_cursor: next }
  }

  /**
   * Sessions matching `filter` in `page.sort` order, newest first by default. With phrases and
   * the `recent` order the full-text index drives: docs follow creation order, so matches come
   * newest first and the query stops at the page size, however many sessions match.
   */
  rows(filter: SessionFilter, page: Page): KeyedRow[] {
    // One snapshot: the org bound chosen for the phrases holds for every read of the index.
    return filter.phrases?.length ? this.db.$client.transaction(() => this.readRows(filter, page))() : this.readRows(filter, page)
  }

  private readRows(filter: SessionFilter, page: Page): KeyedRow[] {
    const sort = page.sort ?? 'recent'
    if (filter.phrases?.length && sort === 'recent') return this.newestMatches(filter, filter.phrases, page)
    const where = this.conditions(filter)
    if (filter.phrases?.length) where.push(matchingAll(this.orgPhrases(filter.orgId, filter.phrases), fromKey(filter)))
    let order: SQL[]
    if (sort === 'recent') {
      order = [desc(sessions.createdAt), desc(docs.key)]
      if (page.after) {
        const { value: createdAt, key } = page.after
        where.push(lte(sessions.createdAt, createdAt), or(lt(sessions.createdAt, createdAt), lt(docs.key, key))!)
      }
    } else {
      const value = SORT_VALUE[sort].sql
      order = [desc(value), desc(docs.key)]
      if (page.after)
        where.push(sql`${value} <= ${page.after.value}`, sql`(${value}, ${docs.key}) < (${page.after.value}, ${page.after.key})`)
    }
    return this.db
      .select(columns)
      .from(sessions)
      .innerJoin(docs, eq(docs.sessionId, sessions.id))
      .where(and(...where))
      .orderBy(...order)
      .limit(page.limit)
      .all()
  }

  count(filter: SessionFilter): number {
    const n = sql<number>`count(*)`
    if (!filter.phrases?.length) {
      return (
        this.db
          .select({ n })
          .from(sessions)
          .where(and(...this.conditions(filter)))
          .get()?.n ?? 0
      )
    }
    const phrases = filter.phrases
    // One snapshot: the org bound chosen for the phrases holds for the read of the index.
    return this.db.$client.transaction(() => this.countMatches(filter, phrases, n))()
  }

  private countMatches(filter: SessionFilter, phrases: string[], n: SQL.Aliased<number> | SQL<number>): number {
    const matching = sql`${docs.doc} IN (${docsMatchingAllSql(this.orgPhrases(filter.orgId, phrases), fromKey(filter))})`
    // The org alone is on the docs row: no need to read the (wide) session rows.
    const orgOnly = Object.entries(filter).every(([name, value]) => name === 'orgId' || name === 'phrases' || value === undefined)
    const row = orgOnly
      ? this.db
          .select({ n })
          .from(docs)
          .where(and(matching, eq(docs.orgId, filter.orgId)))
          .get()
      : this.db
          .select({ n })
          .from(docs)
          .crossJoin(sessions)
          .where(and(matching, eq(sessions.id, docs.sessionId), ...this.conditions(filter)))
          .get()
    return row?.n ?? 0
  }

  /**
   * The `recent` order with phrases: runs of the rarest phrase's docs come newest first from the
   * full-text index (`RarestRuns`), each sized to fill the rest of the page at the share of docs
   * kept so far, and one query per run keeps the docs that hold the other phrases and pass the
   * other filters, until the page is full or the matches run out.
   */
  private newestMatches(filter: SessionFilter, phrases: string[], page: Page): KeyedRow[] {
    const sqlite = this.db.$client
    // Docs follow keys: the range is the docs of sessions with fromKey <= key < the cursor's key.
    type Doc = { doc: number | null }
    const newest = page.after
      ? sqlite.query<Doc, [number]>('SELECT doc FROM session_search_docs WHERE key < ? ORDER BY key DESC LIMIT 1').get(page.after.key)?.doc
      : sqlite.query<Doc, []>('SELECT max(doc) AS doc FROM session_search_docs').get()?.doc
    const from = fromKey(filter)
    const oldest =
      from === undefined
        ? 1
        : sqlite.query<Doc, [number]>('SELECT doc FROM session_search_docs WHERE key >= ? ORDER BY key LIMIT 1').get(from)?.doc
    if (newest == null || oldest == null) return []
    const runs = new RarestRuns(sqlite, this.orgPhrases(filter.orgId, phrases), oldest, newest + 1)
    const found: KeyedRow[] = []
    let docsSeen = 0
    let rowsSeen = 0
    let rows = 0
    for (let run = runs.next(rows); run; run = runs.next(rows)) {
      // The other phrases first: a session row is read only for docs that hold every phrase.
      found.push(
        ...this.db
          .select(columns)
          .from(docs)
          .crossJoin(sessions)
          .where(
            and(
              sql`${docs.doc} IN (SELECT value FROM json_each(${JSON.stringify(run.docs)}))`,
              ...run.others(docs.doc),
              eq(sessions.id, docs.sessionId),
              ...this.conditions(filter),
            ),
          )
          .orderBy(desc(docs.doc))
          .all(),
      )
      if (found.length >= page.limit) break
      // Enough rows of the rarest phrase for the rest of the page, at the share of its docs kept so far.
      docsSeen += run.docs.length
      rowsSeen += run.rows
      rows = ((page.limit - found.length) / (Math.max(found.length, 1) / docsSeen)) * (rowsSeen / docsSeen) * 1.25
    }
    return found.slice(0, page.limit)
  }

  /**
   * A selector names one session: its full id, else a unique id prefix (so also its short_id) or
   * its exact title. Several matches are a 409 listing them; none is a 404.
   */
  private resolve(filter: SessionFilter | null, selector: string) {
    if (!filter) throw notFound(`No session matches "${selector}"`)
    const where = this.conditions(filter)
    const [exact] = this.candidates([...where, eq(sessions.id, selector)])
    if (exact) return this.present.sessions([exact])[0]!
    // Ids are lower-case hex or UUIDs: a prefix is compared lower-cased, as a range on the primary key.
    const prefix = selector.toLowerCase()
    const end = prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1)
    const byId = this.candidates([...this.conditions(filter, false), gte(sessions.id, prefix), lt(sessions.id, end)])
    const byTitle = this.candidates([...where, eq(sessions.title, selector)])
    const found = new Map([...byId, ...byTitle].map((row) => [row.id, row]))
    const matches = [...found.values()].sort((a, b) => b.key - a.key)
    if (matches.length === 0) throw notFound(`No session matches "${selector}"`)
    if (matches.length === 1) return this.present.sessions(matches)[0]!
    const how = matches.length > MAX_CANDIDATES ? `more than ${MAX_CANDIDATES}` : String(matches.length)
    throw new ApiError('conflict', `"${selector}" matches ${how} sessions; use a longer id prefix or the full id`, 'AMBIGUOUS_SELECTOR', {
      candidates: this.present.sessions(matches.slice(0, MAX_CANDIDATES)),
    })
  }

  /**
   * The phrases as the FTS5 queries a search of org `orgId` runs: every full-text read goes through
   * here, so the org bounds the index's own walk, never a filter applied to what it returned. When
   * another org has sessions, each phrase is ANDed with the org's token (`inOrg`); when none has,
   * every row of the index is this org's and the bare phrase is already bounded to it, at the cost
   * of the phrase alone (the token's doclist spans every row then, and walking it in step with a
   * common phrase costs several times the phrase's own read). Callers hold one read transaction
   * across this check and the reads, so an org created in between cannot slip in.
   */
  private orgPhrases(orgId: string, phrases: string[]): string[] {
    const others = this.db.$client
      .query<{ found: number }, [string, string]>('SELECT EXISTS (SELECT 1 FROM sessions WHERE org_id < ? OR org_id > ?) AS found')
      .get(orgId, orgId)
    return others?.found ? phrases.map((phrase) => inOrg(orgId, phrase)) : phrases
  }

  private candidates(where: SQL[]): KeyedRow[] {
    return this.db
      .select(columns)
      .from(sessions)
      .innerJoin(docs, eq(docs.sessionId, sessions.id))
      .where(and(...where))
      .orderBy(desc(docs.key))
      .limit(MAX_CANDIDATES + 1)
      .all()
  }

  /**
   * The query's filter, or null when it can match nothing (`kind=local`; a Project handle this
   * org does not have). Times are parsed first, so a bad one is a 400 either way.
   */
  private filterOf(access: OrgAccess, query: SearchQuery): SessionFilter | null {
    const now = this.now()
    const since = query.since === undefined ? undefined : parseTime('since', query.since, now)
    const until = query.until === undefined ? undefined : parseTime('until', query.until, now)
    if (query.kind === 'local') return null
    let projectId: string | undefined
    if (query.project !== undefined) {
      const project = findProject(this.db, access.orgId, query.project)
      if (!project) return null
      projectId = project.id
    }
    const [owner, name] = query.repo?.split('/') ?? []
    return {
      orgId: access.orgId,
      projectId,
      status: query.status,
      agent: query.agent,
      harness: query.harness,
      mode: query.mode,
      model: query.model,
      repo: owner && name ? { owner, name } : undefined,
      forkedFrom: query.forked_from,
      since,
      until,
      phrases: (query.q ?? []).map(ftsPhrase).filter((p) => p !== null),
    }
  }

  /**
   * Conditions on `sessions` (every query path joins it). `useIndexes: false` keeps SQLite from
   * driving the query from the org, Project or status indexes when another access path (the
   * primary key range of an id prefix) must drive it.
   */
  private conditions(filter: SessionFilter, useIndexes = true): SQL[] {
    const is = (column: typeof sessions.orgId | typeof sessions.projectId | typeof sessions.status, value: string) =>
      useIndexes ? eq(column, value) : sql`+${column} = ${value}`
    const where: SQL[] = [is(sessions.orgId, filter.orgId)]
    if (filter.projectId !== undefined) where.push(is(sessions.projectId, filter.projectId))
    if (filter.status !== undefined) where.push(is(sessions.status, filter.status))
    if (filter.agent !== undefined) where.push(eq(sessions.agent, filter.agent))
    if (filter.harness !== undefined) where.push(eq(sessions.harness, filter.harness))
    if (filter.mode !== undefined) where.push(eq(sessions.mode, filter.mode))
    if (filter.model !== undefined) where.push(eq(sessions.model, filter.model))
    if (filter.repo !== undefined) where.push(eq(sessions.repoOwner, filter.repo.owner), eq(sessions.repoName, filter.repo.name))
    if (filter.forkedFrom !== undefined) where.push(eq(sessions.forkedFromSession, filter.forkedFrom))
    if (filter.since !== undefined) where.push(gte(sessions.createdAt, filter.since))
    if (filter.until !== undefined) where.push(lt(sessions.createdAt, filter.until))
    return where
  }
}

/** Every session created at or after `since` has a key of at least since * KEY_SPACING. */
function fromKey(filter: SessionFilter): number | undefined {
  return filter.since === undefined ? undefined : filter.since * KEY_SPACING
}

function sortValue(sort: SearchSort, row: KeyedRow): number {
  return sort === 'recent' ? row.createdAt : SORT_VALUE[sort].of(row)
}

/**
 * Sessions whose text holds every phrase, for orders the full-text index cannot drive: a
 * membership test against the matching docs, built once. (The unary `+` keeps SQLite from looping
 * over the matches for every row as if they were index lookups.)
 */
function matchingAll(phrases: string[], fromKey?: number): SQL {
  return sql`+${docs.doc} IN (${docsMatchingAllSql(phrases, fromKey)})`
}
