import { afterEach, beforeEach, describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { drizzle } from 'drizzle-orm/bun-sqlite'
import { migrate } from 'drizzle-orm/bun-sqlite/migrator'
import { openDb } from '../../src/db/client'
import * as schema from '../../src/db/schema'
import { decodeCursor, encodeCursor, ftsPhrase, parseTime } from '../../src/search/query'
import { ApiError } from '../../src/domain/errors'
import { SessionSearch } from '../../src/search/service'
import { RarestRuns } from '../../src/search/text'
import { sessionSearchDocs } from '../../src/db/schema'
import { and, inArray } from 'drizzle-orm'
import { message, seedSessions } from '../helpers/seed-sessions'

const NOW = Date.parse('2030-06-15T12:00:00.000Z')

describe('parseTime', () => {
  test('relative times count back from now', () => {
    expect(parseTime('since', '30s', NOW)).toBe(NOW - 30_000)
    expect(parseTime('since', '15m', NOW)).toBe(NOW - 15 * 60_000)
    expect(parseTime('since', '2h', NOW)).toBe(NOW - 2 * 3_600_000)
    expect(parseTime('since', '7d', NOW)).toBe(NOW - 7 * 86_400_000)
    expect(parseTime('since', '2w', NOW)).toBe(NOW - 14 * 86_400_000)
    expect(parseTime('since', '0h', NOW)).toBe(NOW)
  })

  test('ISO 8601 dates and date-times; no offset means UTC', () => {
    expect(parseTime('until', '2030-01-02', NOW)).toBe(Date.parse('2030-01-02T00:00:00Z'))
    expect(parseTime('until', '2030-01-02T03:04:05Z', NOW)).toBe(Date.parse('2030-01-02T03:04:05Z'))
    expect(parseTime('until', '2030-01-02T03:04:05', NOW)).toBe(Date.parse('2030-01-02T03:04:05Z'))
    expect(parseTime('until', '2030-01-02T03:04', NOW)).toBe(Date.parse('2030-01-02T03:04:00Z'))
    expect(parseTime('until', '2030-01-02 03:04:05.123', NOW)).toBe(Date.parse('2030-01-02T03:04:05.123Z'))
    expect(parseTime('until', '2030-01-02T03:04:05+02:00', NOW)).toBe(Date.parse('2030-01-02T01:04:05Z'))
  })

  test('anything else is a 400 naming the parameter', () => {
    for (const bad of ['yesterday', '2h ago', '-2h', '2y', 'h', '2030-13-40', '2030-01-02T25:00:00Z', '1700000000000', '']) {
      let error: unknown
      try {
        parseTime('since', bad, NOW)
      } catch (e) {
        error = e
      }
      expect(error, bad).toBeInstanceOf(ApiError)
      expect((error as ApiError).kind).toBe('invalid')
      expect((error as ApiError).message).toStartWith('since')
    }
  })
})

describe('cursors', () => {
  test('round-trip and stay opaque', () => {
    const cursor = { sort: 'cost' as const, value: 0.1 + 0.2, key: 2 ** 52 + 1 }
    const encoded = encodeCursor(cursor)
    expect(encoded).toMatch(/^[A-Za-z0-9_-]+$/)
    expect(decodeCursor(encoded, 'cost')).toEqual(cursor)
  })

  test('a damaged cursor or one of another sort is a 400', () => {
    const recent = encodeCursor({ sort: 'recent', value: 1, key: 2 })
    expect(() => decodeCursor(recent, 'duration')).toThrow('sort=recent')
    for (const bad of [
      'x',
      recent.slice(0, -2),
      Buffer.from('[2,"recent",1,2]').toString('base64url'),
      Buffer.from('[1,"recent",1,1.5]').toString('base64url'),
    ]) {
      expect(() => decodeCursor(bad, 'recent')).toThrow(ApiError)
    }
  })
})

test('ftsPhrase quotes a value as one phrase and drops values without words', () => {
  expect(ftsPhrase('flaky login')).toBe('"flaky login"')
  expect(ftsPhrase('say "hi"')).toBe('"say ""hi"""')
  expect(ftsPhrase('NEAR(a b)')).toBe('"NEAR(a b)"')
  expect(ftsPhrase('  ')).toBeNull()
  expect(ftsPhrase('***')).toBeNull()
  expect(ftsPhrase('Übersicht')).toBe('"Übersicht"')
})

describe('the index in the database', () => {
  let database: ReturnType<typeof openDb>
  let search: SessionSearch
  const orgId = 'org-1'
  beforeEach(() => {
    database = openDb(':memory:')
    database.sqlite.run('INSERT INTO orgs (id, slug, created_at) VALUES (?, ?, 1)', [orgId, 'org'])
    search = new SessionSearch(database.db, () => NOW)
  })
  afterEach(() => database.close())

  const matches = (...phrases: string[]) =>
    search.rows({ orgId, phrases: phrases.map((p) => ftsPhrase(p)!) }, { limit: 10_000 }).map((r) => r.id)
  const names = <T extends { name: string }>(rows: T[]) => rows.map((r) => r.name).sort()

  test('migrations create the triggers, view, table and indexes the search relies on', () => {
    const objects = database.sqlite
      .query<{ type: string; name: string }, []>("SELECT type, name FROM sqlite_master WHERE name LIKE '%search%' OR name = 'session_fts'")
      .all()
    expect(names(objects.filter((o) => o.type === 'trigger'))).toEqual([
      'session_events_search_delete',
      'session_events_search_insert',
      'session_events_search_update',
      'sessions_search_delete',
      'sessions_search_insert',
      'sessions_search_org',
      'sessions_search_update',
    ])
    expect(names(objects.filter((o) => o.type === 'index' && o.name.startsWith('sessions_search')))).toEqual([
      'sessions_search_cost_idx',
      'sessions_search_duration_idx',
      'sessions_search_filter_idx',
      'sessions_search_title_idx',
    ])
    expect(objects.some((o) => o.type === 'view' && o.name === 'session_search_rows')).toBe(true)
    expect(objects.some((o) => o.type === 'view' && o.name === 'session_search_text')).toBe(false)
    expect(objects.some((o) => o.type === 'table' && o.name === 'session_fts')).toBe(true)
  })

  test('a message is one row of the index, whatever the length of the transcript', () => {
    const [id] = seedSessions(database.sqlite, [
      { orgId, prompt: 'long run', createdAt: NOW, events: Array.from({ length: 300 }, (_, i) => message('assistant', `step ${i}`)) },
    ])
    const { doc } = database.sqlite.query<{ doc: number }, [string]>('SELECT doc FROM session_search_docs WHERE session_id = ?').get(id!)!
    const rows = () =>
      database.sqlite
        .query<{ n: number }, [number, number]>(
          'SELECT count(*) AS n FROM session_fts WHERE rowid >= (? << 32) AND rowid < ((? + 1) << 32)',
        )
        .get(doc, doc)!.n
    expect(rows()).toBe(301)
    database.sqlite.run(
      "INSERT INTO session_events (session_id, seq, turn, kind, type, data, created_at) VALUES (?, 1000, 2, 'harness', 'message', ?, 0)",
      [id!, JSON.stringify({ type: 'message', role: 'assistant', content: 'one more step' })],
    )
    expect(rows()).toBe(302)
    expect(matches('step 299', 'one more step')).toEqual([id!])
    // A phrase is matched within one piece of text (a message, or the title and prompt), not across two.
    expect(matches('299 one')).toEqual([])
  })

  test('stays exact through inserts, messages, renames and deletes (checked against the text)', () => {
    const words = ['alpha', 'bravo', 'charlie', 'delta', 'echo', 'foxtrot', 'golf', 'hotel']
    let state = 7
    const rand = (n: number) => {
      state = (state * 1103515245 + 12345) % 2 ** 31
      return state % n
    }
    const text = () => Array.from({ length: 1 + rand(4) }, () => words[rand(words.length)]).join(' ')
    const ids: string[] = []
    const seqs = new Map<string, number>()
    for (let step = 0; step < 400; step++) {
      const action = ids.length === 0 ? 0 : rand(10)
      if (action < 3) {
        const [id] = seedSessions(database.sqlite, [{ orgId, prompt: text(), createdAt: NOW - rand(1000) }])
        ids.push(id!)
        seqs.set(id!, 4)
      } else if (action < 8) {
        const id = ids[rand(ids.length)]!
        const seq = seqs.get(id)! + 1
        seqs.set(id, seq)
        const content = rand(8) === 0 ? null : text()
        database.sqlite.run(
          "INSERT INTO session_events (session_id, seq, turn, kind, type, data, created_at) VALUES (?, ?, 1, 'harness', ?, ?, 0)",
          [id, seq, rand(4) === 0 ? 'tool_use' : 'message', JSON.stringify({ type: 'message', role: 'assistant', content })],
        )
      } else if (action < 9) {
        const title = text()
        database.sqlite.run('UPDATE sessions SET title = ? WHERE id = ?', [title, ids[rand(ids.length)]!])
      } else if (rand(2) === 0) {
        const id = ids[rand(ids.length)]!
        database.sqlite.run('DELETE FROM session_events WHERE session_id = ? AND seq = ?', [id, 5 + rand(seqs.get(id)! - 3)])
      } else {
        const [id] = ids.splice(rand(ids.length), 1)
        database.sqlite.run('DELETE FROM sessions WHERE id = ?', [id!])
      }
    }
    // What each session says, read from the rows themselves: title, prompt and message contents.
    const bodies = database.sqlite
      .query<{ session_id: string; body: string }, []>(
        `SELECT s.id AS session_id, s.title || ' ' || s.prompt || ' ' || coalesce((SELECT group_concat(e.data ->> '$.content', ' ') FROM session_events e
           WHERE e.session_id = s.id AND e.kind = 'harness' AND e.type = 'message'), '') AS body FROM sessions s`,
      )
      .all()
    expect(bodies.length).toBe(ids.length)
    for (const word of words) {
      const expected = bodies.filter((b) => b.body.split(/\s+/).includes(word)).map((b) => b.session_id)
      expect(new Set(matches(word)), word).toEqual(new Set(expected))
      expect(search.count({ orgId, phrases: [ftsPhrase(word)!] }), word).toBe(expected.length)
    }
    for (const [a, b] of [
      ['alpha', 'bravo'],
      ['charlie', 'hotel'],
      ['delta', 'echo', 'golf'],
    ]) {
      const expected = bodies.filter((x) => [a, b].every((w) => x.body.split(/\s+/).includes(w!))).map((x) => x.session_id)
      expect(new Set(matches(a!, b!))).toEqual(new Set(expected))
      expect(search.count({ orgId, phrases: [ftsPhrase(a!)!, ftsPhrase(b!)!] })).toBe(expected.length)
    }
    // Exactly the rows the view defines: none left behind by a delete or a rename, none missing.
    const indexed = database.sqlite.query<{ rowid: number }, []>('SELECT rowid FROM session_fts ORDER BY rowid').all()
    const defined = database.sqlite
      .query<{ rowid: number }, []>('SELECT (doc << 32) | seq AS rowid FROM session_search_rows ORDER BY 1')
      .all()
    expect(indexed).toEqual(defined)
    database.sqlite.run("INSERT INTO session_fts (session_fts, rank) VALUES ('integrity-check', 0)")
    const counts = database.sqlite
      .query<{ n: number; m: number }, []>(
        "SELECT d.message_count AS n, (SELECT count(*) FROM session_events e WHERE e.session_id = d.session_id AND e.kind = 'harness' AND e.type = 'message') AS m FROM session_search_docs d",
      )
      .all()
    for (const { n, m } of counts) expect(n).toBe(m)
  })

  test('runs of the rarest phrase, checked for the others by sets or by bounded MATCHes alike', () => {
    const rows = seedSessions(
      database.sqlite,
      Array.from({ length: 700 }, (_, i) => ({
        orgId,
        prompt: `task ${i}${i % 2 === 0 ? ' rare' : ''}`,
        createdAt: NOW - 10_000 + i,
        // One long session whose every message holds the common word: a set of its rows or probes.
        events: [
          message('assistant', i % 3 === 0 ? 'common words here' : 'other words'),
          ...(i === 698 ? Array.from({ length: 600 }, () => message('user', 'common again')) : []),
        ],
      })),
    )
    const docOf = new Map(
      database.sqlite
        .query<{ doc: number; session_id: string }, []>('SELECT doc, session_id FROM session_search_docs')
        .all()
        .map((r) => [r.doc, r.session_id]),
    )
    const expected = rows.filter((_, i) => i % 2 === 0 && (i % 3 === 0 || i === 698)).reverse()
    const docs = sessionSearchDocs.doc
    const hi = Math.max(...docOf.keys()) + 1
    for (const probeOverSet of [0, 400, Infinity]) {
      const found: string[] = []
      let runs = 0
      const rarest = new RarestRuns(database.sqlite, ['"common"', '"rare"', '"words"'], 1, hi, probeOverSet)
      for (let run = rarest.next(0); run; run = rarest.next(100)) {
        runs++
        expect(run.docs).toEqual([...run.docs].sort((a, b) => b - a))
        const held = database.db
          .select({ doc: docs })
          .from(sessionSearchDocs)
          .where(and(inArray(docs, run.docs), ...run.others(docs)))
          .all()
        found.push(
          ...held
            .map((r) => r.doc)
            .sort((a, b) => b - a)
            .map((d) => docOf.get(d)!),
        )
      }
      expect(found, String(probeOverSet)).toEqual(expected)
      expect(runs).toBeGreaterThan(1)
    }
  })

  test('keys follow created_at, then creation order, and never collide', () => {
    const same = seedSessions(
      database.sqlite,
      Array.from({ length: 2100 }, (_, i) => ({ orgId, prompt: `burst ${i}`, createdAt: NOW })),
    )
    const [late] = seedSessions(database.sqlite, [{ orgId, prompt: 'clock stepped back', createdAt: NOW - 5 }])
    const [next] = seedSessions(database.sqlite, [{ orgId, prompt: 'next millisecond', createdAt: NOW + 1 }])
    const keys = new Map(
      database.sqlite
        .query<{ session_id: string; key: number }, []>('SELECT session_id, key FROM session_search_docs')
        .all()
        .map((r) => [r.session_id, r.key]),
    )
    expect(new Set(keys.values()).size).toBe(2102)
    expect(keys.get(same[0]!)).toBe(NOW * 2048)
    for (let i = 1; i < same.length; i++) expect(keys.get(same[i]!)).toBe(keys.get(same[i - 1]!)! + 1)
    expect(keys.get(late!)).toBeGreaterThan(keys.get(same.at(-1)!)!)
    expect(keys.get(next!)).toBeGreaterThan(keys.get(late!)!)
    // Newest first: created_at, then the later-created of a tie.
    const recent = search.rows({ orgId }, { limit: 3 }).map((r) => r.id)
    expect(recent).toEqual([next!, same.at(-1)!, same.at(-2)!])
    expect(search.rows({ orgId }, { limit: 5000 }).at(-1)!.id).toBe(late!)
  })

  test('the migration indexes sessions that existed before it', () => {
    // A database as 0003_search's layout left it: every migration before 0006_search_rows.
    const migrations = join(import.meta.dir, '../../drizzle')
    const dir = mkdtempSync(join(tmpdir(), 'agentd-search-migration-'))
    try {
      cpSync(migrations, dir, { recursive: true })
      const journal = JSON.parse(readFileSync(join(dir, 'meta/_journal.json'), 'utf8')) as { entries: { tag: string }[] }
      const at = journal.entries.findIndex((e) => e.tag === '0006_search_rows')
      expect(at).toBeGreaterThan(0)
      writeFileSync(join(dir, 'meta/_journal.json'), JSON.stringify({ ...journal, entries: journal.entries.slice(0, at) }))
      const sqlite = new Database(':memory:', { strict: true })
      sqlite.run('PRAGMA foreign_keys = ON')
      const db = drizzle(sqlite, { schema })
      migrate(db, { migrationsFolder: dir })
      sqlite.run("INSERT INTO orgs (id, slug, created_at) VALUES (?, 'org', 1), ('org-2', 'org-2', 1)", [orgId])
      const rows = seedSessions(sqlite, [
        {
          orgId,
          prompt: 'Old flaky login',
          createdAt: NOW - 2000,
          events: [message('assistant', 'postgres was down'), message('user', 'retry')],
        },
        { orgId, prompt: 'Older one', createdAt: NOW - 3000 },
        { orgId, prompt: 'Same millisecond', createdAt: NOW - 3000 },
        { orgId: 'org-2', prompt: 'Elsewhere flaky', createdAt: NOW - 1000, events: [message('assistant', 'postgres too')] },
      ])
      const keys = sqlite
        .query<{ session_id: string; key: number }, []>('SELECT session_id, key FROM session_search_docs ORDER BY key')
        .all()

      migrate(db, { migrationsFolder: migrations })
      const upgraded = new SessionSearch(db, () => NOW)
      const found = (...phrases: string[]) =>
        upgraded.rows({ orgId, phrases: phrases.map((p) => ftsPhrase(p)!) }, { limit: 100 }).map((r) => r.id)
      // Keys survive, docs follow them, and the org is copied.
      expect(
        sqlite.query<{ session_id: string; key: number }, []>('SELECT session_id, key FROM session_search_docs ORDER BY doc').all(),
      ).toEqual(keys)
      expect(
        sqlite
          .query<{ n: number }, []>(
            'SELECT count(*) AS n FROM session_search_docs d JOIN sessions s ON s.id = d.session_id AND s.org_id = d.org_id',
          )
          .get()!.n,
      ).toBe(4)
      expect(found('flaky', 'postgres')).toEqual([rows[0]!])
      expect(found('retry')).toEqual([rows[0]!])
      expect(upgraded.count({ orgId, phrases: [ftsPhrase('postgres')!] })).toBe(1)
      expect(upgraded.rows({ orgId }, { limit: 10 }).map((r) => [r.id, r.messageCount])).toEqual([
        [rows[0]!, 2],
        [rows[2]!, 0],
        [rows[1]!, 0],
      ])
      // And the triggers work on top of the backfilled rows.
      const [newest] = seedSessions(sqlite, [
        { orgId, prompt: 'Newest flaky', createdAt: NOW, events: [message('assistant', 'postgres again')] },
      ])
      expect(found('flaky', 'postgres')).toEqual([newest!, rows[0]!])
      sqlite.run('DELETE FROM sessions WHERE id = ?', [rows[0]!])
      expect(found('flaky', 'postgres')).toEqual([newest!])
      sqlite.close()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
