import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'
import { req, script, waitFor } from '../helpers/http'
import { startMcpServer, type TestMcpServer } from '../helpers/mcp-server'

/**
 * Shape B `connections` (spec 4.1 rules 1-5) through the HTTP API of a real agentd on bwrap: each
 * CLI calls a tool of a local MCP server (the official SDK's streamable HTTP server) through the
 * egress proxy, which adds the server's token; the token never enters the sandbox or the
 * transcript, and the sandbox reaches nothing else.
 */

const TOKEN = `tickets-secret-${randomBytes(8).toString('hex')}`
let t: TestApp
let mcp: TestMcpServer
let configDir: string

beforeAll(async () => {
  mcp = startMcpServer()
  configDir = mkdtempSync(join(tmpdir(), 'agentd-connections-'))
  const config = join(configDir, 'agentd.json')
  writeFileSync(config, JSON.stringify({ accounts: { encryption_key: randomBytes(32).toString('base64') } }))
  // The tool server listens on 127.0.0.1: AGENTD_WEBHOOK_ALLOW_PRIVATE lets runs name it (tests only).
  t = await makeTestApp({ AGENTD_SANDBOX: 'bwrap', AGENTD_CONFIG: config, AGENTD_WEBHOOK_ALLOW_PRIVATE: '1' })
})
afterAll(async () => {
  await t?.[Symbol.asyncDispose]()
  mcp?.stop()
  rmSync(configDir, { recursive: true, force: true })
})

const SESSIONS = '/o/acme/p/_/sessions'
async function call(method: string, path: string, body?: unknown, token = t.admin.token) {
  const res = await t.app.handle(req(method, path, { token, body }))
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : null }
}
async function finished(id: string) {
  return waitFor(
    async () => (await call('GET', `${SESSIONS}/${id}`)).body,
    (s) => !['queued', 'allocating', 'running'].includes(s.status),
    60_000,
  )
}
const toolOutputs = (id: string) =>
  t.store
    .allEvents(id)
    .filter((e) => e.type === 'tool_result')
    .map((e) => String(e.data.output ?? ''))
    .join('\n')

/** Everything of a session the host keeps or the sandbox could read: events, raw lines, logs, home and workspace files. */
function everything(id: string): string {
  const events = JSON.stringify(t.store.allEvents(id))
  const raw = t.store
    .transcriptLines(id)
    .map((l) => l.line)
    .join('\n')
  const files = Bun.spawnSync([
    'sh',
    '-c',
    'grep -rI -l . "$1" 2>/dev/null | xargs -r cat 2>/dev/null',
    'sh',
    join(t.dir, 'sandboxes', id),
  ]).stdout.toString()
  return `${events}\n${raw}\n${files}`
}

describe('connections', () => {
  test('each harness calls a tool of the session’s tool server through the egress proxy, which adds the token; the token is nowhere in the sandbox or the transcript', async () => {
    for (const harness of ['harness_1', 'harness_2', 'harness_3'] as const) {
      const before = mcp.lookups.length
      const created = await call('POST', SESSIONS, {
        harness,
        input: script([{ mcp: { server: 'tickets', tool: 'lookup', input: { id: `T-${harness}` } } }, { answer: 'looked it up' }]),
        connections: [{ url: mcp.url, name: 'tickets', auth: { mode: 'bearer', token: TOKEN } }],
      })
      expect(created.status).toBe(202)
      const done = await finished(created.body.execution_id)
      expect({ harness, status: done.status, error: done.error }).toEqual({ harness, status: 'completed', error: null })
      expect(mcp.lookups.slice(before)).toEqual([`T-${harness}`])
      expect(toolOutputs(done.execution_id)).toContain(`ticket T-${harness}: open, assigned to ada`)
      const all = everything(done.execution_id)
      // The scan reads the CLI's own config, which names the server (with the gateway key only).
      expect(all).toMatch(/mcpServers|mcp_servers/)
      expect(all).not.toContain(TOKEN)
    }
    // The server saw its own token on every request, never the gateway's key.
    expect(new Set(mcp.authorizations)).toEqual(new Set([`Bearer ${TOKEN}`]))
  }, 120_000)

  test('the sandbox reaches the tool server only through the proxy: directly it cannot; follow-ups keep the server, from the starter only', async () => {
    const port = new URL(mcp.url).port
    const created = await call('POST', SESSIONS, {
      harness: 'harness_2',
      input: script([
        { bash: `curl -s -m 3 -o /dev/null -w '%{http_code}' http://127.0.0.1:${port}/mcp; echo " exit=$?"` },
        { answer: 'tried' },
      ]),
      connections: [{ url: mcp.url, name: 'tickets', auth: { mode: 'bearer', token: TOKEN } }],
    })
    const id = created.body.execution_id
    await finished(id)
    expect(toolOutputs(id)).not.toContain('200')
    expect(toolOutputs(id)).toMatch(/exit=[1-9]/)
    const before = mcp.lookups.length
    // Another member may read the session, but not make it call the server with the starter's token.
    const intruder = await call(
      'POST',
      `${SESSIONS}/${id}/messages`,
      { content: script([{ mcp: { server: 'tickets', tool: 'lookup', input: { id: 'X-1' } } }, { answer: 'mine' }]) },
      t.member.token,
    )
    expect(intruder.status).toBe(403)
    expect(
      (
        await call('POST', `${SESSIONS}/${id}/messages`, {
          content: script([{ mcp: { server: 'tickets', tool: 'lookup', input: { id: 'T-2' } } }, { answer: 'again' }]),
        })
      ).status,
    ).toBe(200)
    await waitFor(
      async () => (await call('GET', `${SESSIONS}/${id}`)).body,
      (s) => s.turns_count === 2 && s.status !== 'running',
      60_000,
    )
    expect(mcp.lookups.slice(before)).toEqual(['T-2'])
  }, 60_000)

  test('from inside, the proxy serves only this session’s servers, and only with this turn’s gateway key', async () => {
    // The attack reads the gateway key and the proxy's address from the CLI's own MCP config.
    const probe = [
      `CFG=$HOME/.claude/agentd-mcp.json`,
      `KEY=$(sed -n 's/.*Bearer \\([^"]*\\)".*/\\1/p' $CFG)`,
      `URL=$(sed -n 's/.*"url":"\\([^"]*\\)\\/tickets".*/\\1/p' $CFG)`,
      `for path in intruder desk; do printf "%s=%s " $path $(curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $KEY" -H 'content-type: application/json' -d '{}' $URL/$path); done`,
      `printf "forged=%s" $(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'Authorization: Bearer forged' -d '{}' $URL/tickets)`,
    ].join('; ')
    const created = await call('POST', SESSIONS, {
      harness: 'harness_1',
      input: script([{ bash: probe }, { answer: 'probed' }]),
      connections: [{ url: mcp.url, name: 'tickets', auth: { mode: 'bearer', token: TOKEN } }],
    })
    const done = await finished(created.body.execution_id)
    expect(done.status).toBe('completed')
    expect(toolOutputs(done.execution_id)).toContain('intruder=404 desk=404 forged=401')
  }, 60_000)

  test('a sandbox keeps at most 16 exchanges with its tool servers open: the 17th is 429', async () => {
    // A tool server that never answers: every exchange stays open until the client gives up.
    const silent = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Promise<Response>(() => {}) })
    try {
      const flood = [
        `CFG=$HOME/.claude/agentd-mcp.json`,
        `KEY=$(sed -n 's/.*Bearer \\([^"]*\\)".*/\\1/p' $CFG)`,
        `URL=$(sed -n 's/.*"url":"\\([^"]*\\)\\/silent".*/\\1/p' $CFG)`,
        `for i in $(seq 20); do curl -s -o /dev/null -w '%{http_code}\\n' -m 4 -X POST -H "Authorization: Bearer $KEY" -d '{}' $URL/silent & done; wait`,
      ].join('; ')
      const created = await call('POST', SESSIONS, {
        harness: 'harness_1',
        input: script([{ bash: flood }, { answer: 'flooded' }]),
        connections: [{ url: `http://127.0.0.1:${silent.port}/mcp`, name: 'silent' }],
      })
      const done = await finished(created.body.execution_id)
      const codes = toolOutputs(done.execution_id)
        .trim()
        .split('\n')
        .map((c) => c.trim())
        .filter(Boolean)
        .sort()
      // Open ones were still waiting when curl gave up (000); the CLI's own connect to the server
      // may hold a slot too, so at least 4 of the 20 are refused, and never more than 16 open.
      const open = codes.filter((c) => c === '000').length
      const refused = codes.filter((c) => c === '429').length
      expect(open + refused).toBe(20)
      expect(open).toBeLessThanOrEqual(16)
      expect(refused).toBeGreaterThanOrEqual(4)
    } finally {
      silent.stop(true)
    }
  }, 60_000)

  test('stored connections: the token is never returned; a run names one by id or name, user-level or of its Project', async () => {
    const stored = await call('POST', '/o/acme/connections', { name: 'desk', url: mcp.url, auth: { mode: 'bearer', token: TOKEN } })
    expect(stored.status).toBe(201)
    expect(stored.body).toMatchObject({ name: 'desk', url: mcp.url, project_id: null, auth_mode: 'bearer', status: 'ready' })
    expect(JSON.stringify(stored.body)).not.toContain(TOKEN)
    expect(JSON.stringify((await call('GET', '/o/acme/connections')).body)).not.toContain(TOKEN)
    // Another member sees none of it and cannot name it.
    expect((await call('GET', '/o/acme/connections', undefined, t.member.token)).body.data).toEqual([])
    for (const entry of [stored.body.id, 'desk']) {
      const before = mcp.lookups.length
      const created = await call('POST', SESSIONS, {
        harness: 'harness_2',
        input: script([{ mcp: { server: 'desk', tool: 'lookup', input: { id: 'D-1' } } }, { answer: 'ok' }]),
        connections: [entry],
      })
      expect(created.status).toBe(202)
      expect((await finished(created.body.execution_id)).status).toBe('completed')
      expect(mcp.lookups.slice(before)).toEqual(['D-1'])
    }
    const other = await call('POST', SESSIONS, { harness: 'harness_2', input: 't', connections: ['desk'] }, t.member.token)
    expect({ status: other.status, code: other.body.code }).toEqual({ status: 422, code: 'CONNECTION_NOT_READY' })
    // A Project-level one of the same name makes "desk" ambiguous in that Project only.
    expect((await call('POST', '/o/acme/connections', { name: 'desk', url: mcp.url, project: 'web' })).status).toBe(201)
    const ambiguous = await call('POST', '/o/acme/p/web/sessions', { harness: 'harness_2', input: 't', connections: ['desk'] })
    expect({ status: ambiguous.status, code: ambiguous.body.code }).toEqual({ status: 422, code: 'CONNECTION_AMBIGUOUS' })
    expect(ambiguous.body.error).toContain(stored.body.id)
    // An inline server may not take the name of one of the caller's named servers (spec 4.1 rule 3).
    const clash = await call('POST', SESSIONS, { harness: 'harness_2', input: 't', connections: [{ url: mcp.url, name: 'desk' }] })
    expect({ status: clash.status, code: clash.body.code }).toEqual({ status: 422, code: 'CONNECTION_AMBIGUOUS' })
    expect(clash.body.error).toContain(stored.body.id)
    // Another member's connection of that name does not clash: names match only the caller's own rows.
    const theirs = await call(
      'POST',
      SESSIONS,
      { harness: 'harness_2', input: 't', connections: [{ url: mcp.url, name: 'desk' }] },
      t.member.token,
    )
    expect(theirs.body.code).not.toBe('CONNECTION_AMBIGUOUS')
    expect((await call('DELETE', `/o/acme/connections/${stored.body.id}`)).status).toBe(204)
    expect((await call('POST', SESSIONS, { harness: 'harness_2', input: 't', connections: [stored.body.id] })).body.code).toBe(
      'CONNECTION_NOT_READY',
    )
  }, 60_000)

  test('every rule of spec 4.1 for inline servers has its answer, and nothing is created', async () => {
    const before = (await call('GET', SESSIONS)).body.executions.length
    const cases: [unknown[], number, string][] = [
      [[{ url: mcp.url, token: TOKEN }], 400, 'FIELD_REMOVED'],
      [[{ url: 'not a url' }], 422, 'MCP_SERVER_URL_INVALID'],
      [[{ url: 'ftp://example.com/mcp' }], 422, 'MCP_SERVER_URL_INVALID'],
      [
        [
          { url: mcp.url, name: 'a' },
          { url: mcp.url, name: 'a' },
        ],
        422,
        'CONNECTION_AMBIGUOUS',
      ],
      [[{ url: mcp.url, auth: { mode: 'basic', token: 'x' } }], 400, 'VALIDATION_ERROR'],
      [['no-such-connection'], 422, 'CONNECTION_NOT_READY'],
    ]
    for (const [connections, status, code] of cases) {
      const answer = await call('POST', SESSIONS, { harness: 'harness_2', input: 't', connections })
      expect({ connections, status: answer.status, code: answer.body.code }).toEqual({ connections, status, code })
    }
    expect((await call('POST', '/o/acme/connections', { name: 'Bad Name', url: mcp.url })).status).toBe(400)
    expect((await call('GET', SESSIONS)).body.executions.length).toBe(before)
  })
})

describe('Project connectors', () => {
  const WEB = '/o/acme/p/web/sessions'
  async function settledIn(path: string, id: string, turns = 1) {
    return waitFor(
      async () => (await call('GET', `${path}/${id}`)).body,
      (s) => s.turns_count >= turns && !['queued', 'allocating', 'running'].includes(s.status),
      60_000,
    )
  }

  test('an admin lends a connection to a Project: a key run of it calls the tool with the owner’s token, which stays out of the sandbox; a member may follow up', async () => {
    const lent = await call('POST', '/o/acme/connections', { name: 'desk2', url: mcp.url, auth: { mode: 'bearer', token: TOKEN } })
    expect(lent.status).toBe(201)
    // Attacks: a member may not attach a connector, not even their own; an admin may not lend another user's.
    const members = await call('POST', '/o/acme/connections', { name: 'mine', url: mcp.url }, t.member.token)
    expect((await call('PUT', `/o/acme/projects/web/connections/${members.body.id}`, undefined, t.member.token)).status).toBe(403)
    expect((await call('PUT', `/o/acme/projects/web/connections/${members.body.id}`)).status).toBe(404)
    expect((await call('DELETE', `/o/acme/projects/web/connections/${lent.body.id}`, undefined, t.member.token)).status).toBe(403)
    const attached = await call('PUT', '/o/acme/projects/web/connections/desk2')
    expect(attached).toMatchObject({ status: 200, body: { id: lent.body.id, name: 'desk2', auth_mode: 'bearer', status: 'ready' } })
    expect(JSON.stringify(attached.body)).not.toContain(TOKEN)
    // Members see what every run of the Project gets (never the token).
    const listed = await call('GET', '/o/acme/projects/web/connections', undefined, t.member.token)
    expect(listed.body.data.map((c: { id: string }) => c.id)).toEqual([lent.body.id])

    // A key run of the Project names no connection (it may not), and gets the Project's.
    const key = await call('POST', '/o/acme/api-keys', { name: 'desk-runs' })
    const before = mcp.lookups.length
    const run = await call(
      'POST',
      WEB,
      { agent: 'harness_2', prompt: script([{ mcp: { server: 'desk2', tool: 'lookup', input: { id: 'P-1' } } }, { answer: 'looked' }]) },
      key.body.secret,
    )
    expect(run.status).toBe(202)
    const id = run.body.execution_id as string
    const done = await settledIn(WEB, id)
    expect({ status: done.status, error: done.error }).toEqual({ status: 'completed', error: null })
    expect(mcp.lookups.slice(before)).toEqual(['P-1'])
    expect(mcp.authorizations.at(-1)).toBe(`Bearer ${TOKEN}`)
    expect(everything(id)).not.toContain(TOKEN)
    // Lent to every run of the Project: another member's follow-up is not refused as a personal server's would be.
    const followUp = await call(
      'POST',
      `${WEB}/${id}/messages`,
      { content: script([{ mcp: { server: 'desk2', tool: 'lookup', input: { id: 'P-2' } } }, { answer: 'again' }]) },
      t.member.token,
    )
    expect(followUp.status).toBe(200)
    await settledIn(WEB, id, 2)
    expect(mcp.lookups.slice(before)).toEqual(['P-1', 'P-2'])

    // A run naming a server of its own under the connector's name is ambiguous.
    const clash = await call('POST', WEB, { harness: 'harness_2', input: 't', connections: [{ url: mcp.url, name: 'desk2' }] })
    expect(clash).toMatchObject({ status: 422, body: { code: 'CONNECTION_AMBIGUOUS' } })
    // Naming the very connection the Project has from them is no clash: the Project's copy serves.
    const same = await call('POST', WEB, { harness: 'harness_2', input: script([{ answer: 'same' }]), connections: ['desk2'] })
    expect(same.status).toBe(202)
    await settledIn(WEB, same.body.execution_id)
    // Detached (by name): later runs go without it; the earlier one keeps its copy, no longer lent to
    // every member: only its starter may give it more work now.
    expect((await call('DELETE', '/o/acme/projects/web/connections/desk2')).status).toBe(204)
    const afterDetach = await call('POST', `${WEB}/${id}/messages`, { content: script([{ answer: 'no' }]) }, t.member.token)
    expect(afterDetach.status).toBe(403)
    // Nor may a member fork it to go on with the owner's token.
    expect((await call('POST', `${WEB}/${id}/fork`, undefined, t.member.token)).status).toBe(403)
    expect((await call('GET', '/o/acme/projects/web/connections')).body.data).toEqual([])
    const later = await call('POST', WEB, { agent: 'harness_2', prompt: script([{ answer: 'plain' }]) }, key.body.secret)
    await settledIn(WEB, later.body.execution_id)
    expect(everything(later.body.execution_id)).not.toContain('desk2')
    expect(everything(id)).toContain('desk2')
  }, 120_000)
})
