import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { openDb } from '../../src/db/client'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script } from '../helpers/http'
import { message, seedSessions, type SeedSession } from '../helpers/seed-sessions'
import { settled } from '../helpers/sessions'

const HOUR = 3_600_000
const DAY = 24 * HOUR

let t: TestApp
let db: ReturnType<typeof openDb>
let now: number
let globex: { admin: { token: string }; web: { id: string }; ids: string[] }
const acme: Record<string, string> = {}
let api: { id: string }

const id = (prefix: string, n: number) => `${prefix}${String(n).padStart(4, '0')}-0000-4000-8000-000000000000`

beforeAll(async () => {
  t = await makeTestApp()
  db = openDb(t.config.dbPath)
  now = Date.now()
  api = t.identity.createProject('acme', 'api', 'acme/api')
  const base = { orgId: t.org.id, startedByUserId: t.admin.id }
  const rows: Record<string, SeedSession> = {
    s5: {
      ...base,
      id: id('aaaa', 5),
      projectId: api.id,
      prompt: 'Fix the flaky login test on CI',
      status: 'completed',
      totalCostUsd: 0.5,
      createdAt: now - 40 * DAY,
      completedAt: now - 40 * DAY + 60_000,
      summary: 'x'.repeat(300),
    },
    s4: {
      ...base,
      id: id('bbbb', 4),
      projectId: t.project.id,
      prompt: 'Refactor the billing invoice module',
      status: 'running',
      toolCallsCount: 3,
      createdAt: now - 10 * DAY,
      events: [message('user', 'also rename the tests'), message('assistant', 'Line one\nLast line of thought\n')],
    },
    s3: {
      ...base,
      id: id('cccc', 3),
      projectId: api.id,
      prompt: 'Investigate slow checkout\nwith all the details',
      harness: 'harness_3',
      agent: 'harness_3@0.61.0',
      model: 'gemini-2.5-pro',
      status: 'failed',
      error: 'the model answered with an error',
      repoOwner: 'acme',
      repoName: 'api',
      createdAt: now - 2 * DAY,
      completedAt: null,
      sessionCapture: 'failed',
    },
    s2: {
      ...base,
      id: id('aaab', 2),
      startedByUserId: t.member.id,
      prompt: 'Upgrade react to v19',
      harness: 'harness_2',
      model: 'gpt-5',
      mode: 'interactive',
      status: 'input_required',
      inputTokens: 1200,
      outputTokens: 300,
      totalCostUsd: 2.25,
      createdAt: now - 3 * HOUR,
      completedAt: now - 3 * HOUR + HOUR,
      events: [message('assistant', 'Übersicht of the café changes'), { type: 'tool_use', tool: 'Bash', command: 'npm test' }],
    },
    s1: {
      ...base,
      id: id('aaaa', 1),
      projectId: t.project.id,
      prompt: 'Fix the flaky login test on CI',
      status: 'completed',
      summary: 'Done: fixed the login test',
      totalCostUsd: 0.5,
      createdAt: now - HOUR,
      completedAt: now - HOUR + 600_000,
      events: [
        message('assistant', 'The postgres connection was refused in the login flow'),
        message('assistant', 'Retrying with a longer timeout'),
      ],
    },
  }
  for (const [name, row] of Object.entries(rows)) acme[name] = seedSessions(db.sqlite, [row])[0]!

  // Another org with the same words, the same title and a Project named `web`, all newer.
  t.identity.createOrg('globex')
  const admin = t.identity.createUser('globex', 'admin@globex.test', 'admin')
  const web = t.identity.createProject('globex', 'web', 'globex/web')
  t.identity.createProject('globex', 'ops', null)
  const ids = seedSessions(
    db.sqlite,
    [0, 1, 2].map((i) => ({
      orgId: t.identity.orgBySlug('globex').id,
      id: id(i === 0 ? 'aaaa' : 'dddd', 10 + i),
      projectId: web.id,
      prompt: i === 0 ? 'Fix the flaky login test on CI' : `globexonly task ${i}`,
      createdAt: now - 60_000 + i,
      events: [message('assistant', 'postgres connection was refused again')],
    })),
  )
  globex = { admin, web, ids }
})

afterAll(async () => {
  db.close()
  await t[Symbol.asyncDispose]()
})

const get = (path: string, token = t.admin.token) => t.app.handle(req('GET', path, { token }))
const list = async (query: string, token?: string) => {
  const res = await get(`/o/acme/sessions${query ? `?${query}` : ''}`, token)
  expect(res.status).toBe(200)
  return json(res)
}
const ids = async (query: string, token?: string) => (await list(query, token)).sessions.map((s: { id: string }) => s.id)
const names = (...keys: string[]) => keys.map((k) => acme[k]!)

describe('GET /o/{org}/sessions: the list', () => {
  test('every session of the org, newest first, in the Session row shape', async () => {
    const body = await list('')
    expect(body.count).toBeNull()
    expect(body.next_cursor).toBeNull()
    expect(body.sessions.map((s: { id: string }) => s.id)).toEqual(names('s1', 's2', 's3', 's4', 's5'))
    const [s1, s2, s3, s4, s5] = body.sessions
    expect(s1).toMatchObject({
      id: acme.s1,
      kind: 'cloud',
      short_id: acme.s1!.slice(0, 8),
      title: 'Fix the flaky login test on CI',
      project: 'web',
      org_id: t.org.id,
      project_id: t.project.id,
      agent: 'harness_1',
      harness: 'harness_1',
      model: 'scripted',
      mode: 'headless',
      status: 'completed',
      prompt: 'Fix the flaky login test on CI',
      session_capture: 'complete',
      message_count: 2,
      input_tokens: 0,
      output_tokens: 0,
      cache_read_tokens: 0,
      cache_write_tokens: 0,
      tool_call_count: 0,
      artifact_count: 0,
      artifacts: [],
      cost_usd: 0.5,
      duration_ms: 600_000,
      started_by: { name: 'admin', avatar_url: null },
      summary: 'Done: fixed the login test',
      agent_profile: null,
      created_at: new Date(now - HOUR).toISOString(),
    })
    expect(s2).toMatchObject({
      project: null,
      harness: 'harness_2',
      mode: 'interactive',
      input_tokens: 1200,
      output_tokens: 300,
      cost_usd: 2.25,
    })
    expect(s2.started_by).toEqual({ name: 'member', avatar_url: null })
    // No stored summary yet: the last line of the latest assistant text.
    expect(s2.summary).toBe('Übersicht of the café changes')
    expect(s2.message_count).toBe(1)
    expect(s3).toMatchObject({
      agent: 'harness_3@0.61.0',
      harness: 'harness_3',
      cost_usd: 0,
      duration_ms: null,
      error: 'the model answered with an error',
      summary: null,
    })
    expect(s4).toMatchObject({
      status: 'running',
      summary: 'Last line of thought',
      message_count: 2,
      tool_call_count: 3,
      duration_ms: null,
    })
    expect(s5.summary).toHaveLength(200)
    expect(s5.project).toBe('api')
  })

  test('limit 1..500 (default 50) pages with next_cursor', async () => {
    const first = await list('limit=2')
    expect(first.sessions).toHaveLength(2)
    expect(typeof first.next_cursor).toBe('string')
    const second = await list(`limit=2&cursor=${first.next_cursor}`)
    const third = await list(`limit=2&cursor=${second.next_cursor}`)
    expect([...first.sessions, ...second.sessions, ...third.sessions].map((s: { id: string }) => s.id)).toEqual(
      names('s1', 's2', 's3', 's4', 's5'),
    )
    expect(third.next_cursor).toBeNull()
    expect((await list('limit=500')).sessions).toHaveLength(5)
    expect((await list('limit=5')).next_cursor).toBeNull()
  })

  test('sort=cost and sort=duration, highest first; ties newest first; no cost is 0, no duration last', async () => {
    expect(await ids('sort=cost')).toEqual(names('s2', 's1', 's5', 's3', 's4'))
    expect(await ids('sort=duration')).toEqual(names('s2', 's1', 's5', 's3', 's4'))
    expect(await ids('sort=recent')).toEqual(names('s1', 's2', 's3', 's4', 's5'))
    const page = await list('sort=cost&limit=2')
    expect(await ids(`sort=cost&limit=3&cursor=${page.next_cursor}`)).toEqual(names('s5', 's3', 's4'))
  })

  test('count=true gives only the count', async () => {
    expect(await list('count=true')).toEqual({ sessions: [], count: 5, next_cursor: null })
    expect((await list('count=true&status=completed')).count).toBe(2)
    expect((await list('count=true&q=flaky')).count).toBe(2)
    expect((await list('count=true&q=flaky&project=web')).count).toBe(1)
    expect((await list('count=true&kind=local')).count).toBe(0)
    expect((await list('count=true&project=ops')).count).toBe(0)
    expect((await list('count=false&limit=1')).sessions).toHaveLength(1)
  })
})

describe('filters', () => {
  test('project by handle or id; another org’s handle or id gives no rows', async () => {
    expect(await ids('project=web')).toEqual(names('s1', 's4'))
    expect(await ids(`project=${api.id}`)).toEqual(names('s3', 's5'))
    expect(await ids('project=ops')).toEqual([])
    expect(await ids(`project=${globex.web.id}`)).toEqual([])
    expect(await ids('project=nope')).toEqual([])
  })

  test('agent, kind, harness, mode, model, repo and status', async () => {
    expect(await ids('agent=harness_3@0.61.0')).toEqual(names('s3'))
    expect(await ids('agent=harness_3')).toEqual([])
    expect(await ids('kind=cloud')).toEqual(names('s1', 's2', 's3', 's4', 's5'))
    expect(await ids('kind=local')).toEqual([])
    expect(await ids('harness=harness_2')).toEqual(names('s2'))
    expect(await ids('mode=interactive')).toEqual(names('s2'))
    expect(await ids('model=gemini-2.5-pro')).toEqual(names('s3'))
    expect(await ids('repo=acme/api')).toEqual(names('s3'))
    expect(await ids('repo=acme/web')).toEqual([])
    expect(await ids('status=running')).toEqual(names('s4'))
    expect(await ids('status=completed&project=web&harness=harness_1')).toEqual(names('s1'))
  })

  test('since and until, relative or ISO 8601', async () => {
    expect(await ids('since=2h')).toEqual(names('s1'))
    expect(await ids('since=90m')).toEqual(names('s1'))
    expect(await ids('since=1d')).toEqual(names('s1', 's2'))
    expect(await ids('since=1w')).toEqual(names('s1', 's2', 's3'))
    expect(await ids('until=1d')).toEqual(names('s3', 's4', 's5'))
    expect(await ids('since=30d&until=1d')).toEqual(names('s3', 's4'))
    const iso = new Date(now - 5 * DAY).toISOString()
    expect(await ids(`since=${iso}`)).toEqual(names('s1', 's2', 's3'))
    expect(await ids(`until=${iso}`)).toEqual(names('s4', 's5'))
    expect(await ids(`since=${iso.slice(0, 10)}`)).toContain(acme.s3)
    expect(await ids(`since=${encodeURIComponent(iso.replace('Z', '+00:00'))}`)).toEqual(names('s1', 's2', 's3'))
    expect(await ids('since=2h&q=flaky')).toEqual(names('s1'))
  })
})

describe('q: full text over title, prompt and transcript', () => {
  test('matches the prompt and title, or message content; every term must match', async () => {
    expect(await ids('q=flaky')).toEqual(names('s1', 's5'))
    expect(await ids('q=postgres')).toEqual(names('s1'))
    expect(await ids('q=flaky&q=postgres')).toEqual(names('s1'))
    expect(await ids('q=flaky&q=nothing-like-this')).toEqual([])
    expect(await ids('q=rename')).toEqual(names('s4'))
  })

  test('a value is a phrase: its words in order; case and accents do not matter', async () => {
    expect(await ids(`q=${encodeURIComponent('connection was refused')}`)).toEqual(names('s1'))
    expect(await ids(`q=${encodeURIComponent('refused connection')}`)).toEqual([])
    expect(await ids('q=UBERSICHT')).toEqual(names('s2'))
    expect(await ids('q=cafe')).toEqual(names('s2'))
    expect(await ids('q=Café')).toEqual(names('s2'))
  })

  test('query syntax is taken literally; a value without words constrains nothing', async () => {
    for (const q of ['"', 'AND', 'flaky OR', 'NEAR(', '-flaky', 'login*', 'a"b', '(', '^', 'body:flaky']) {
      const res = await get(`/o/acme/sessions?q=${encodeURIComponent(q)}`)
      expect(res.status).toBe(200)
    }
    expect(await ids(`q=${encodeURIComponent('flaky OR')}`)).toEqual([])
    expect(await ids(`q=&q=${encodeURIComponent('  ')}`)).toEqual(names('s1', 's2', 's3', 's4', 's5'))
    expect(await ids(`q=${encodeURIComponent('"flaky"')}`)).toEqual(names('s1', 's5'))
  })

  test('follows writes: a new message, a changed prompt, a deleted session', async () => {
    const [extra] = seedSessions(db.sqlite, [{ orgId: t.org.id, prompt: 'Write the release notes', createdAt: now - 5 * HOUR }])
    expect(await ids('q=release')).toEqual([extra])
    expect(await ids('q=kangaroo')).toEqual([])
    db.sqlite.run(
      "INSERT INTO session_events (session_id, seq, turn, kind, type, data, created_at) VALUES (?, 99, 2, 'harness', 'message', ?, ?)",
      [
        extra!,
        JSON.stringify({
          type: 'message',
          agent: 'harness_1',
          timestamp: new Date().toISOString(),
          role: 'assistant',
          content: 'A kangaroo appeared',
        }),
        now,
      ],
    )
    expect(await ids('q=kangaroo&q=release')).toEqual([extra])
    expect((await list('q=kangaroo')).sessions[0].message_count).toBe(1)
    db.sqlite.run("UPDATE sessions SET title = 'Draft the changelog', prompt = 'Draft the changelog' WHERE id = ?", [extra!])
    expect(await ids('q=release')).toEqual([])
    expect(await ids('q=changelog&q=kangaroo')).toEqual([extra])
    db.sqlite.run('DELETE FROM sessions WHERE id = ?', [extra!])
    expect(await ids('q=kangaroo')).toEqual([])
    expect(await ids('q=changelog')).toEqual([])
  })

  test('a real run is searchable by what its agent said', async () => {
    t.plans.setPlan('acme', { maxConcurrent: 10 })
    const res = await t.app.handle(
      req('POST', '/o/acme/p/web/sessions', {
        token: t.admin.token,
        body: { agent: 'harness_1', prompt: script([{ say: 'Found a zanzibar quartz vein' }, { answer: 'done' }]) },
      }),
    )
    expect(res.status).toBe(202)
    const created = await json(res)
    await settled(() => get(`/o/acme/p/_/sessions/${created.execution_id}`).then(json))
    const found = await list('q=zanzibar&q=quartz')
    expect(found.sessions.map((s: { id: string }) => s.id)).toEqual([created.execution_id])
    expect(found.sessions[0].message_count).toBeGreaterThanOrEqual(1)
    expect(found.sessions[0].project).toBe('web')
    // Out of the way of the other tests: end it, then remove it.
    await t.app.handle(
      req('PATCH', `/o/acme/p/_/sessions/${created.execution_id}`, { token: t.admin.token, body: { status: 'cancelled' } }),
    )
    db.sqlite.run('DELETE FROM sessions WHERE id = ?', [created.execution_id])
  })
})

describe('selector', () => {
  const resolve = (selector: string, extra = '') => get(`/o/acme/sessions?selector=${encodeURIComponent(selector)}${extra}`)

  test('full id, unique id prefix (short_id), or title gives one Session', async () => {
    for (const selector of [acme.s3!, acme.s3!.slice(0, 8), acme.s3!.slice(0, 8).toUpperCase(), 'cccc', 'Upgrade react to v19']) {
      const res = await resolve(selector)
      expect(res.status).toBe(200)
      const body = await json(res)
      expect(body.id).toBe(selector === 'Upgrade react to v19' ? acme.s2 : acme.s3)
      expect(body.short_id).toBe(body.id.slice(0, 8))
    }
  })

  test('several matches: 409 AMBIGUOUS_SELECTOR with the candidates, newest first', async () => {
    for (const [selector, expected] of [
      ['aaaa', names('s1', 's5')],
      ['aaa', names('s1', 's2', 's5')],
      ['Fix the flaky login test on CI', names('s1', 's5')],
    ] as const) {
      const res = await resolve(selector)
      expect(res.status).toBe(409)
      const body = await json(res)
      expect(body.code).toBe('AMBIGUOUS_SELECTOR')
      expect(typeof body.message).toBe('string')
      expect(body.candidates.map((s: { id: string }) => s.id)).toEqual(expected)
      expect(body.candidates[0]).toHaveProperty('short_id')
    }
  })

  test('filters narrow the resolution; q is ignored', async () => {
    expect((await json(await resolve('Fix the flaky login test on CI', '&project=web'))).id).toBe(acme.s1)
    expect((await json(await resolve('aaaa', '&status=completed&since=7d'))).id).toBe(acme.s1)
    expect((await json(await resolve(acme.s1!, '&q=nothing-matches-this'))).id).toBe(acme.s1)
    expect((await resolve(acme.s1!, '&kind=local')).status).toBe(404)
  })

  test('no match is 404 in the {code, message} envelope', async () => {
    const res = await resolve('zzzz')
    expect(res.status).toBe(404)
    expect(await json(res)).toEqual({ code: 'NOT_FOUND', message: 'No session matches "zzzz"', requestId: expect.stringMatching(/^req_/) })
    expect((await resolve(acme.s1!, '&project=api')).status).toBe(404)
  })
})

describe('errors use {code, message}', () => {
  test('400 for every malformed parameter', async () => {
    for (const query of [
      'limit=0',
      'limit=501',
      'limit=ten',
      'sort=oldest',
      'status=sleeping',
      'harness=harness_9',
      'kind=remote',
      'mode=batch',
      'count=maybe',
      'repo=acme',
      'repo=a/b/c',
      'since=yesterday',
      'until=2025-13-45',
      'since=-2h',
      'cursor=not-a-cursor',
      'selector=',
    ]) {
      const res = await get(`/o/acme/sessions?${query}`)
      expect(res.status, query).toBe(400)
      const body = await json(res)
      expect(body.code, query).toBe('VALIDATION_ERROR')
      expect(typeof body.message, query).toBe('string')
      expect(body.error, query).toBeUndefined()
    }
  })

  test('a cursor belongs to its sort', async () => {
    const { next_cursor } = await list('limit=1')
    const res = await get(`/o/acme/sessions?sort=cost&cursor=${next_cursor}`)
    expect(res.status).toBe(400)
    expect((await json(res)).message).toContain('sort=recent')
  })

  test('401 without a valid bearer, 404 for an org the caller has no role in', async () => {
    const none = await t.app.handle(req('GET', '/o/acme/sessions'))
    expect(none.status).toBe(401)
    expect(await json(none)).toEqual({
      code: 'AUTH_FAILED',
      message: 'A bearer token is required',
      requestId: expect.stringMatching(/^req_/),
    })
    const bad = await get('/o/acme/sessions', 'agt_unknown')
    expect(bad.status).toBe(401)
    expect((await json(bad)).code).toBe('AUTH_FAILED')
    for (const path of ['/o/nope/sessions', '/o/globex/sessions']) {
      const res = await get(path, t.member.token)
      expect(res.status).toBe(404)
      expect(await json(res)).toEqual({ code: 'NOT_FOUND', message: 'Org not found', requestId: expect.stringMatching(/^req_/) })
    }
  })

  test('other routes keep the {error} envelope', async () => {
    const res = await get('/o/acme/p/nope/sessions')
    expect(res.status).toBe(404)
    expect(await json(res)).toEqual({ error: 'Project not found', requestId: expect.stringMatching(/^req_/) })
    const bad = await get('/o/acme/p/_/sessions?limit=0')
    expect(bad.status).toBe(400)
    expect((await json(bad)).error).toEqual(expect.any(String))
  })
})

describe('org isolation', () => {
  test('a member of acme never sees globex rows, by any parameter', async () => {
    const token = t.member.token
    const seen = new Set<string>()
    for (const query of [
      '',
      'limit=500',
      'q=flaky',
      'q=postgres',
      'q=globexonly',
      `project=${globex.web.id}`,
      'project=web',
      'since=5m',
      'sort=cost',
      'sort=duration',
      'harness=harness_1',
    ]) {
      for (const s of (await list(query, token)).sessions) seen.add(s.id)
    }
    for (const g of globex.ids) expect(seen.has(g)).toBe(false)
    expect((await list('q=globexonly', token)).sessions).toEqual([])
    expect((await list('count=true&q=postgres', token)).count).toBe(1)
    for (const selector of [globex.ids[1]!, globex.ids[1]!.slice(0, 8), 'dddd', 'globexonly task 1']) {
      expect((await get(`/o/acme/sessions?selector=${encodeURIComponent(selector)}`, token)).status).toBe(404)
    }
    // The shared title resolves to acme's own two sessions only.
    const res = await get(`/o/acme/sessions?selector=${encodeURIComponent('Fix the flaky login test on CI')}`, token)
    expect((await json(res)).candidates.map((s: { id: string }) => s.id)).toEqual(names('s1', 's5'))
    // And globex sees its own, but not acme's.
    expect((await get('/o/acme/sessions?q=flaky', globex.admin.token)).status).toBe(404)
    const own = await get('/o/globex/sessions?q=globexonly', globex.admin.token)
    expect((await json(own)).sessions).toHaveLength(2)
  })
})

describe('cursor walks', () => {
  let walker: { token: string }
  let original: Set<string>
  let bulkOrg: string
  beforeAll(() => {
    bulkOrg = t.identity.createOrg('bulk').id
    walker = t.identity.createUser('bulk', 'walker@bulk.test', 'member')
    // 1,000 sessions, three per millisecond (ties), costs and durations with many ties too.
    const rows: SeedSession[] = Array.from({ length: 1000 }, (_, i) => ({
      orgId: bulkOrg,
      prompt: `Task ${i}: ${i % 2 ? 'needle in the haystack' : 'plain hay'}`,
      status: i % 7 === 0 ? 'failed' : 'completed',
      totalCostUsd: i % 5 === 0 ? null : (i % 13) / 4,
      createdAt: now - 30 * DAY + Math.floor(i / 3),
      completedAt: i % 4 === 0 ? null : now - 30 * DAY + Math.floor(i / 3) + (i % 11) * 1000,
      events: i % 3 === 0 ? [message('assistant', `needle note ${i}`)] : [],
    }))
    original = new Set(seedSessions(db.sqlite, rows))
  })

  async function walk(query: string, limit: number, between: (page: number) => void) {
    const seen: string[] = []
    let cursor: string | null = null
    for (let page = 0; page < 1000; page++) {
      const res = await get(`/o/bulk/sessions?limit=${limit}&${query}${cursor ? `&cursor=${cursor}` : ''}`, walker.token)
      expect(res.status).toBe(200)
      const body = await json(res)
      seen.push(...body.sessions.map((s: { id: string }) => s.id))
      cursor = body.next_cursor
      if (!cursor) break
      between(page)
    }
    return seen
  }

  let inserted = 0
  /** New sessions while a walk runs: newer ones, and some dated inside the range being walked. */
  const insertSome = (page: number) => {
    const when = page % 2 ? now - 30 * DAY + 100 + page : now + page
    seedSessions(db.sqlite, [
      { orgId: bulkOrg, prompt: `Inserted ${inserted++} needle`, totalCostUsd: page % 3, createdAt: when, completedAt: when + 5_000 },
      { orgId: bulkOrg, prompt: `Inserted ${inserted++} needle`, createdAt: when },
    ])
  }

  for (const [name, query, matches] of [
    ['recent', 'sort=recent', () => true],
    ['cost', 'sort=cost', () => true],
    ['duration', 'sort=duration', () => true],
    ['q (full-text index drives)', 'q=needle', (i: number) => i % 2 === 1 || i % 3 === 0],
    ['q with sort=cost', 'q=needle&sort=cost', (i: number) => i % 2 === 1 || i % 3 === 0],
    ['status filter', 'status=failed', (i: number) => i % 7 === 0],
  ] as const) {
    test(`${name}: each of 1,000 rows exactly once, with inserts between pages`, async () => {
      const expected = new Set([...original].filter((_, i) => matches(i)))
      const seen = await walk(query, 37, insertSome)
      expect(new Set(seen).size).toBe(seen.length)
      const seenOriginal = seen.filter((s) => original.has(s))
      expect(seenOriginal.length).toBe(expected.size)
      expect(new Set(seenOriginal)).toEqual(expected)
    })
  }

  test('pages follow the sort order across cursors', async () => {
    for (const [sort, value] of [
      ['cost', (s: { cost_usd: number }) => s.cost_usd],
      ['duration', (s: { duration_ms: number | null }) => s.duration_ms ?? -1],
      ['recent', (s: { created_at: string }) => Date.parse(s.created_at)],
    ] as const) {
      const rows: Record<string, unknown>[] = []
      let cursor: string | null = null
      do {
        const body: { sessions: Record<string, unknown>[]; next_cursor: string | null } = await json(
          await get(`/o/bulk/sessions?sort=${sort}&limit=200${cursor ? `&cursor=${cursor}` : ''}`, walker.token),
        )
        rows.push(...body.sessions)
        cursor = body.next_cursor
      } while (cursor)
      expect(new Set(rows.map((r) => r.id)).size).toBe(rows.length)
      for (let i = 1; i < rows.length; i++) expect(value(rows[i - 1] as never)).toBeGreaterThanOrEqual(value(rows[i] as never))
    }
  })
})

describe('the Project list shares the query layer', () => {
  test('newest first, ties in creation order; status and limit', async () => {
    const tie = t.identity.createProject('acme', 'tie', null)
    const [first, second] = seedSessions(db.sqlite, [
      { orgId: t.org.id, projectId: tie.id, prompt: 'one', createdAt: now - DAY },
      { orgId: t.org.id, projectId: tie.id, prompt: 'two', createdAt: now - DAY, status: 'failed' },
    ])
    const body = await json(await get('/o/acme/p/tie/sessions'))
    expect(body.executions.map((s: { execution_id: string }) => s.execution_id)).toEqual([second, first])
    const failed = await json(await get('/o/acme/p/tie/sessions?status=failed'))
    expect(failed.executions.map((s: { execution_id: string }) => s.execution_id)).toEqual([second])
    expect(
      (await json(await get('/o/acme/p/web/sessions?limit=1'))).executions.map((s: { execution_id: string }) => s.execution_id),
    ).toEqual([acme.s1])
    db.sqlite.run('DELETE FROM sessions WHERE id IN (?, ?)', [first!, second!])
  })
})

test('the route is in the OpenAPI document', async () => {
  const doc = await json(await t.app.handle(req('GET', '/openapi.json')))
  const op = doc.paths['/o/{org}/sessions'].get
  expect(op.operationId).toBe('sessions.search')
  expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '404', '409']))
  const params = op.parameters.map((p: { name: string }) => p.name)
  for (const name of [
    'selector',
    'q',
    'project',
    'agent',
    'kind',
    'harness',
    'mode',
    'model',
    'repo',
    'status',
    'since',
    'until',
    'sort',
    'count',
    'limit',
    'cursor',
  ]) {
    expect(params).toContain(name)
  }
})
