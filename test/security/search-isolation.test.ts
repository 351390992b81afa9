/**
 * Attack: find another tenant's sessions through the org-wide full-text search. Two orgs hold
 * many sessions sharing a phrase, created interleaved so their rows sit side by side in the
 * index. Org A's searches (every sort, every page, counts, several phrases) never return org B's
 * sessions, and the org bound is inside the FTS5 query itself: every MATCH agentd runs names the
 * org, and even with the docs table's org column forged, the index returns only the org's rows.
 */
import { Database, type Statement } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { openDb } from '../../src/db/client'
import { inOrg, orgToken } from '../../src/search/text'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'
import { message, seedSessions, type SeedSession } from '../helpers/seed-sessions'

const PER_ORG = 300
let t: TestApp
let db: ReturnType<typeof openDb>
let globex: { id: string; token: string; ids: Set<string> }
let acmeIds: Set<string>

beforeAll(async () => {
  t = await makeTestApp()
  db = openDb(t.config.dbPath)
  const org = t.identity.createOrg('globex')
  const admin = t.identity.createUser('globex', 'admin@globex.test', 'admin')
  const now = Date.now()
  const rows: SeedSession[] = []
  // Interleaved in time: each org's docs are spread over the whole index, never one block.
  for (let i = 0; i < PER_ORG * 2; i++) {
    const mine = i % 2 === 0
    rows.push({
      orgId: mine ? t.org.id : org.id,
      prompt: `deploy the zebra pipeline ${mine ? 'acme' : 'globex'} ${i}`,
      totalCostUsd: i / 100,
      createdAt: now - (PER_ORG * 2 - i) * 1000,
      events: [message('assistant', `the zebra pipeline is green ${i}`)],
    })
  }
  const ids = seedSessions(db.sqlite, rows)
  acmeIds = new Set(ids.filter((_, i) => i % 2 === 0))
  globex = { id: org.id, token: admin.token, ids: new Set(ids.filter((_, i) => i % 2 === 1)) }
})
afterAll(async () => {
  db.close()
  await t[Symbol.asyncDispose]()
})

const get = async (path: string, token = t.admin.token) => {
  const res = await t.app.handle(req('GET', path, { token }))
  expect(res.status).toBe(200)
  return json(res)
}

/** Every session of every page of `query` in org acme. */
async function allPages(query: string): Promise<string[]> {
  const seen: string[] = []
  let cursor: string | null = null
  do {
    const page: any = await get(`/o/acme/sessions?${query}&limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`)
    seen.push(...page.sessions.map((s: { id: string }) => s.id))
    cursor = page.next_cursor
  } while (cursor)
  return seen
}

/** Records the SQL and bound parameters of every statement any connection of this process runs while `fn` does. */
async function recordStatements(fn: () => Promise<unknown>): Promise<{ sql: string; params: unknown[] }[]> {
  const seen: { sql: string; params: unknown[] }[] = []
  const proto = Database.prototype as any
  const originals = { query: proto.query, prepare: proto.prepare }
  const wrap = (statement: Statement, sql: string) => {
    for (const method of ['all', 'get', 'values', 'run', 'iterate'] as const) {
      const original = (statement as any)[method]
      if (typeof original !== 'function') continue
      ;(statement as any)[method] = function (this: Statement, ...params: unknown[]) {
        seen.push({ sql, params: params.flatMap((p) => (p && typeof p === 'object' && !Array.isArray(p) ? Object.values(p) : p)) })
        return original.apply(this, params)
      }
    }
    return statement
  }
  proto.query = function (this: Database, sql: string) {
    return wrap(originals.query.call(this, sql), sql)
  }
  proto.prepare = function (this: Database, sql: string, ...rest: unknown[]) {
    return wrap(originals.prepare.call(this, sql, ...rest), sql)
  }
  try {
    await fn()
  } finally {
    proto.query = originals.query
    proto.prepare = originals.prepare
  }
  return seen
}

describe('full-text search is isolated by org inside the index', () => {
  test("org A's searches never return org B's sessions: every sort, page, count and phrase combination", async () => {
    for (const query of [
      'q=zebra+pipeline',
      'q=zebra&q=green',
      'q=zebra+pipeline&sort=cost',
      'q=pipeline&sort=duration',
      'q=globex',
      'q=zebra&since=1d',
    ]) {
      const found = await allPages(query)
      for (const id of found) expect(globex.ids.has(id)).toBe(false)
      if (query !== 'q=globex') expect(new Set(found)).toEqual(acmeIds)
      else expect(found).toEqual([])
    }
    expect((await get('/o/acme/sessions?q=zebra&count=true')).count).toBe(PER_ORG)
    expect((await get('/o/acme/sessions?q=zebra&q=green&count=true')).count).toBe(PER_ORG)
    // And the other way round.
    const theirs = await get('/o/globex/sessions?q=zebra+pipeline&limit=500', globex.token)
    expect(new Set(theirs.sessions.map((s: { id: string }) => s.id))).toEqual(globex.ids)
  })

  test('every MATCH agentd runs for a search carries the org bound in the FTS5 query text', async () => {
    const statements = await recordStatements(async () => {
      await allPages('q=zebra&q=green')
      await allPages('q=zebra&sort=cost')
      await get('/o/acme/sessions?q=pipeline&count=true')
    })
    const matching = statements.filter((s) => /session_fts\s+MATCH/i.test(s.sql))
    expect(matching.length).toBeGreaterThan(0)
    const bound = `org : ${orgToken(t.org.id)} AND body : `
    for (const { sql, params } of matching) {
      const matches = sql.match(/session_fts\s+MATCH/gi)!.length
      const queries = params.filter((p): p is string => typeof p === 'string' && p.includes(' : '))
      // One FTS5 query string per MATCH, each the org's bound ANDed with the phrase.
      expect(queries.length, sql).toBe(matches)
      for (const q of queries) expect(q.startsWith(bound), q).toBe(true)
    }
    // FTS5 itself serves the MATCH (the plan's virtual-table index), not a scan filtered afterwards.
    const plan = db.sqlite
      .query<{ detail: string }, [string]>(
        'EXPLAIN QUERY PLAN SELECT rowid FROM session_fts WHERE session_fts MATCH ? ORDER BY rowid DESC LIMIT 10',
      )
      .all(inOrg(t.org.id, '"zebra"'))
    expect(plan.map((p) => p.detail).join('\n')).toMatch(/VIRTUAL TABLE INDEX/)
  })

  test("the index alone keeps org B's rows out: with the docs table's org forged, A's count and matches stay A's", async () => {
    // The count path reads the narrow docs table only: forge it so every globex doc claims to be acme's.
    const forged = db.sqlite.run('UPDATE session_search_docs SET org_id = ? WHERE org_id = ?', [t.org.id, globex.id])
    expect(forged.changes).toBe(PER_ORG)
    try {
      expect((await get('/o/acme/sessions?q=zebra&count=true')).count).toBe(PER_ORG)
      // And straight at the index: the org-bound MATCH yields acme's docs only.
      const docs = db.sqlite
        .query<{ session_id: string }, [string]>(
          'SELECT d.session_id FROM session_fts f JOIN session_search_docs d ON d.doc = f.rowid >> 32 WHERE session_fts MATCH ?',
        )
        .all(inOrg(t.org.id, '"zebra pipeline"'))
      expect(docs.length).toBe(PER_ORG * 2) // the prompt row and the message row of each
      for (const { session_id } of docs) expect(acmeIds.has(session_id)).toBe(true)
    } finally {
      db.sqlite.run('UPDATE session_search_docs SET org_id = ? WHERE session_id IN (SELECT id FROM sessions WHERE org_id = ?)', [
        globex.id,
        globex.id,
      ])
    }
  })
})
