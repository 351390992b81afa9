import type { Database } from 'bun:sqlite'
import { sql, type SQL, type SQLWrapper } from 'drizzle-orm'

/**
 * Full-text matching over `session_fts`, whose rows are pieces of one session's text (its title
 * and prompt, or one message) with `rowid = doc * 2^32 + seq` (src/db/schema/search.ts). A phrase
 * matches a session when it occurs in any of the session's rows; a search matches when every
 * phrase does, each possibly in another row. FTS5 only intersects within a row, so the
 * intersection across rows is done here, on docs, never on whole transcripts.
 */

/**
 * The FTS5 query for `phrase` within org `orgId`'s rows only. Every row of `session_fts` holds its
 * session's org as one token of its `org` column (migration 0007_search_org), so FTS5 intersects
 * the phrase's doclist with the org's while it walks the index: another org's rows never leave the
 * index, whatever the SQL around the MATCH does. `phrase` is an FTS5 phrase (`ftsPhrase`).
 */
export function inOrg(orgId: string, phrase: string): string {
  return `org : ${orgToken(orgId)} AND body : ${phrase}`
}

/**
 * An org's token in `session_fts.org`: 'o' and its id's UTF-8 bytes in hex (as the triggers write it),
 * one unicode61 token whatever the id holds.
 */
export function orgToken(orgId: string): string {
  return `o${Buffer.from(orgId, 'utf8').toString('hex')}`
}

/** Rows of each phrase read first (to find the rarest), and the most any later read of the rarest takes. */
/** The FTS rows of the docs from `first` up to `below`: a doc's rows are rowid (doc << 32) + n. */
const rowidsOf = (first: SQLWrapper | number, below: SQLWrapper | number) => sql`rowid >= (${first} << 32) AND rowid < (${below} << 32)`

const FIRST_READ = 256
const MAX_READ = 4096

/**
 * The other phrases' docs are checked by reading all their rows in the run's doc range into a set
 * (about 0.1 µs a row), or by one rowid-bounded MATCH per doc of the run (tens of µs each, FTS5
 * opening every segment): a set unless it would hold this many times more rows than the run has docs.
 */
const PROBE_OVER_SET = 400

/** A run of docs holding the rarest phrase, newest first, and how to check a doc for the others. */
export interface Run {
  /** Distinct docs, descending. */
  docs: number[]
  /** Rows of the rarest phrase read for them. */
  rows: number
  /** Conditions on a doc column: the doc's rows hold each of the other phrases. */
  others: (doc: SQLWrapper) => SQL[]
}

/** Docs holding `phrase` in [lo, below), newest first, from at most `limit` rows. */
function readDocs(sqlite: Database, phrase: string, lo: number, below: number, limit: number): { docs: number[]; rows: number } {
  const rows = sqlite
    .query<unknown, [string, number, number, number]>(
      'SELECT rowid >> 32 FROM session_fts WHERE session_fts MATCH ? ' +
        'AND rowid >= (? << 32) AND rowid < (? << 32) ORDER BY rowid DESC LIMIT ?',
    )
    .values(phrase, lo, below, limit) as [number][]
  // A session's rows are adjacent: keep each doc once.
  const docs: number[] = []
  for (const [doc] of rows) if (doc !== docs[docs.length - 1]) docs.push(doc)
  return { docs, rows: rows.length }
}

interface Phrase {
  phrase: string
  /** Rows per doc where its newest rows lie. */
  density: number
}

/**
 * Docs in [lo, hi) whose rows hold every phrase, as runs of the rarest phrase's docs, newest
 * first; the caller asks for each run and stops when its page is full. The rarest phrase is the
 * one whose newest rows reach furthest back. A run's docs are checked for the other phrases with
 * MATCHes bounded to the run's rowid range, so a phrase common in the newest sessions costs reads
 * of that range only, and the work follows the sessions the page actually needs.
 */
export class RarestRuns {
  private rarest: Phrase | null = null
  private others: Phrase[] = []
  private first: { docs: number[]; rows: number } | null = null
  /** Docs below this one are unread (exclusive); null once the rarest phrase's rows ran out. */
  private below: number | null

  constructor(
    private readonly sqlite: Database,
    phrases: string[],
    private readonly lo: number,
    hi: number,
    private readonly probeOverSet = PROBE_OVER_SET,
  ) {
    this.below = phrases.length === 0 || hi <= lo ? null : hi
    if (this.below === null) return
    // Each phrase's newest rows; how far back they reach gives its density.
    const firsts = phrases.map((phrase) => {
      const read = readDocs(sqlite, phrase, lo, hi, FIRST_READ)
      const reach = read.rows < FIRST_READ ? lo : read.docs[read.docs.length - 1]!
      return { phrase, read, density: read.rows / Math.max(1, hi - reach) }
    })
    if (firsts.some((f) => f.read.docs.length === 0)) {
      this.below = null
      return
    }
    firsts.sort((a, b) => a.density - b.density)
    this.rarest = firsts[0]!
    this.others = firsts.slice(1)
    this.first = firsts[0]!.read
  }

  /** The next run, from about `rows` rows of the rarest phrase (the first run is what was read to pick it); null when done. */
  next(rows: number): Run | null {
    if (this.below === null || this.rarest === null) return null
    let read = this.first
    this.first = null
    if (!read) {
      const limit = Math.max(FIRST_READ / 4, Math.min(MAX_READ, Math.ceil(rows)))
      read = readDocs(this.sqlite, this.rarest.phrase, this.lo, this.below, limit)
      if (read.rows < limit) this.below = null
    } else if (read.rows < FIRST_READ) this.below = null
    if (read.docs.length === 0) {
      this.below = null
      return null
    }
    const docs = read.docs
    const newest = docs[0]!
    const oldest = docs[docs.length - 1]!
    // The next run starts below this one's oldest doc, skipping whatever rows of it were not read.
    if (this.below !== null) this.below = oldest <= this.lo ? null : oldest
    const span = newest + 1 - oldest
    return {
      docs,
      rows: read.rows,
      others: (doc) =>
        this.others.map(({ phrase, density }) =>
          density * span > this.probeOverSet * docs.length
            ? sql`EXISTS (SELECT 1 FROM session_fts WHERE session_fts MATCH ${phrase} AND ${rowidsOf(doc, sql`(${doc} + 1)`)})`
            : sql`+${doc} IN (SELECT rowid >> 32 FROM session_fts WHERE session_fts MATCH ${phrase} AND ${rowidsOf(oldest, newest + 1)})`,
        ),
    }
  }
}

/**
 * SQL for the set of docs whose rows hold every phrase, optionally only docs of sessions whose
 * key is at least `fromKey` (docs follow keys): each phrase's docs, intersected. Reads every match
 * of every phrase, so it serves counts and the orders the full-text index cannot drive, not
 * newest-first pages.
 */
export function docsMatchingAllSql(phrases: string[], fromKey?: number): SQL {
  const from =
    fromKey === undefined
      ? sql``
      : sql` AND rowid >= ((SELECT doc FROM session_search_docs WHERE key >= ${fromKey} ORDER BY key LIMIT 1) << 32)`
  const sets = phrases.map((phrase) => sql`SELECT rowid >> 32 FROM session_fts WHERE session_fts MATCH ${phrase}${from}`)
  return sql.join(sets, sql` INTERSECT `)
}
