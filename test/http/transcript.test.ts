/**
 * One script on all three harnesses over the real API (spec 4.3, 4.4): the normalized transcript,
 * the tool-call index and the raw trajectory, and every parameter and error of those reads.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import type { Harness } from '../../src/domain/harness'
import { makeTestApp, type TestApp } from '../helpers/app'
import { ACCEPTANCE_STEPS } from '../helpers/harness'
import { json, req, script, waitFor } from '../helpers/http'
import { settled } from '../helpers/sessions'

const HARNESSES: Harness[] = ['harness_1', 'harness_2', 'harness_3']
let t: TestApp
const ids = {} as Record<Harness, string>
const sessions = {} as Record<Harness, any>

const get = (path: string, headers: Record<string, string> = {}, token = t.admin.token) =>
  t.app.handle(req('GET', path, { token, headers }))
const base = (h: Harness) => `/o/acme/p/_/sessions/${ids[h]}`
const settledRun = (id: string) => settled(() => get(`/o/acme/p/_/sessions/${id}`).then(json))
const messages = async (h: Harness, query = '') => json(await get(`${base(h)}/messages${query}`))
const toolCalls = async (h: Harness, query = '') => json(await get(`${base(h)}/tool-calls${query}`))

beforeAll(async () => {
  t = await makeTestApp()
  t.plans.setPlan('acme', { maxConcurrent: 10 })
  // The three runs go in parallel: each CLI takes 0.3 to 2.5 s.
  await Promise.all(
    HARNESSES.map(async (harness) => {
      const res = await t.app.handle(
        req('POST', '/o/acme/p/web/sessions', { token: t.admin.token, body: { agent: harness, prompt: script(ACCEPTANCE_STEPS) } }),
      )
      expect(res.status).toBe(202)
      ids[harness] = (await json(res)).execution_id
      sessions[harness] = await settledRun(ids[harness])
    }),
  )
}, 60_000)
afterAll(() => t[Symbol.asyncDispose]())

describe('the acceptance script on every harness', () => {
  test('each run completes with three tool calls, one of them an error, captured completely', () => {
    for (const h of HARNESSES) {
      expect(sessions[h]).toMatchObject({
        status: 'completed',
        tool_calls_count: 3,
        tool_errors_count: 1,
        turns_count: 1,
        session_capture: 'complete',
        model: 'scripted',
        summary: 'all done',
      })
      expect(sessions[h].input_tokens).toBeGreaterThan(0)
      expect(sessions[h].effective_config.harness_version).toBe(sessions[h].harness_version_resolved)
      expect(readFileSync(join(t.dir, 'sandboxes', ids[h], 'workspace', 'notes/out.txt'), 'utf8')).toBe('written by the agent')
    }
  })

  test('the normalized events have the same types in the same order (Gemini emits no thinking)', async () => {
    const types = {} as Record<Harness, string[]>
    for (const h of HARNESSES)
      types[h] = (await messages(h)).events.map((e: { type: string; role?: string }) => (e.role ? `${e.type}:${e.role}` : e.type))
    const expected = [
      'init',
      'message:user',
      'thinking',
      'message:assistant',
      ...['tool_use', 'tool_result', 'tool_use', 'tool_result', 'tool_use', 'tool_result'],
      'message:assistant',
      'usage',
      'result',
    ]
    expect(types.harness_1).toEqual(expected)
    expect(types.harness_2).toEqual(expected)
    expect(types.harness_3).toEqual(expected.filter((type) => type !== 'thinking'))
  })

  test('tool calls: ls and head, then false failing with exit code 1, then the write', async () => {
    for (const h of HARNESSES) {
      const { tool_calls: calls } = await toolCalls(h)
      expect(calls).toHaveLength(3)
      expect(calls.map((c: { ordinal: number }) => c.ordinal)).toEqual([0, 1, 2])
      expect(calls[0]).toMatchObject({ program: 'ls', programs: ['ls', 'head'], outcome: 'success', exit_code: 0 })
      expect(calls[1]).toMatchObject({ program: 'false', programs: ['false'], outcome: 'error', exit_code: 1, error_code: 'NON_ZERO_EXIT' })
      expect(calls[2].outcome).toBe('success')
      expect(calls.filter((c: { outcome: string }) => c.outcome === 'error')).toHaveLength(1)
      for (const call of calls) {
        expect(typeof JSON.parse(call.input)).toBe('object')
        expect(Number.isNaN(Date.parse(call.end_timestamp))).toBe(false)
        expect(call.call_key).toStartWith('1:')
      }
    }
    // Each harness's own tools: Claude's Bash and Write, Codex's shell for everything, Gemini's two.
    const tools = async (h: Harness) => (await toolCalls(h)).tool_calls.map((c: { tool: string }) => c.tool)
    expect(await tools('harness_1')).toEqual(['Bash', 'Bash', 'Write'])
    expect(await tools('harness_2')).toEqual(['exec_command', 'exec_command', 'exec_command'])
    expect(await tools('harness_3')).toEqual(['run_shell_command', 'run_shell_command', 'write_file'])
    expect((await toolCalls('harness_2')).tool_calls[2].programs).toEqual(['mkdir', 'printf'])
  })
})

describe('GET …/messages', () => {
  test('the whole transcript with its format, agent and count; exit codes are not part of the events', async () => {
    const body = await messages('harness_2')
    expect(body).toMatchObject({ execution_id: ids.harness_2, agent: 'harness_2', format: 'harness_2' })
    expect(body.event_count).toBe(body.events.length)
    expect(body.events.every((e: Record<string, unknown>) => !('exitCode' in e))).toBe(true)
    expect(body.events[1]).toMatchObject({ type: 'message', role: 'user', content: script(ACCEPTANCE_STEPS) })
  })

  test('include keeps only the listed roles; exclude drops them and keeps the rest', async () => {
    const onlyUser = await messages('harness_1', '?include=user')
    expect(onlyUser.events.map((e: { role: string }) => e.role)).toEqual(['user'])
    const talk = await messages('harness_1', '?include=assistant,thinking')
    expect(talk.events.map((e: { type: string }) => e.type)).toEqual(['thinking', 'message', 'message'])
    const tools = await messages('harness_1', '?include=tools')
    expect(tools.event_count).toBe(6)
    const noTools = await messages('harness_1', '?exclude=tools,thinking')
    expect(noTools.events.map((e: { type: string }) => e.type)).toEqual(['init', 'message', 'message', 'message', 'usage', 'result'])
  })

  test('400 for an unknown role, include with exclude, first with last, a bad count', async () => {
    for (const query of [
      '?include=robots',
      '?exclude=user,,bogus',
      '?include=user&exclude=tools',
      '?first=1&last=1',
      '?first=0',
      '?last=-2',
      '?first=x',
      '?include=',
    ]) {
      const res = await get(`${base('harness_1')}/messages${query}`)
      expect(res.status).toBe(400)
      expect(typeof (await json(res)).error).toBe('string')
    }
    expect((await json(await get(`${base('harness_1')}/messages?include=robots`))).error).toContain('unknown role "robots"')
  })

  test('first and last count turns (a turn starts at each user message), before the role filter', async () => {
    // A follow-up makes a second turn on the same Codex thread.
    const res = await t.app.handle(req('POST', `${base('harness_2')}/messages`, { token: t.admin.token, body: { content: 'And now?' } }))
    expect([200, 202]).toContain(res.status)
    await waitFor(
      () => get(base('harness_2')).then(json),
      (s) => s.turns_count === 2 && s.status === 'completed',
      30_000,
    )
    const all = await messages('harness_2')
    const first = await messages('harness_2', '?first=1')
    const last = await messages('harness_2', '?last=1')
    expect(first.event_count + last.event_count).toBe(all.event_count)
    expect(last.events[1]).toMatchObject({ type: 'message', role: 'user', content: 'And now?' })
    expect((await messages('harness_2', '?last=1&include=assistant')).events.map((e: { content: string }) => e.content)).toEqual([
      'Done: And now?',
    ])
    expect((await messages('harness_2', '?first=1&include=user')).events).toHaveLength(1)
    expect((await messages('harness_2', '?first=5')).event_count).toBe(all.event_count)
    // The follow-up's usage is its own turn's, not the thread's running total.
    const usage = all.events.filter((e: { type: string }) => e.type === 'usage')
    expect(usage).toHaveLength(2)
    expect(usage[1].inputTokens).toBeLessThan(usage[0].inputTokens)
    const session = await json(await get(base('harness_2')))
    expect(session.input_tokens).toBe(usage[0].inputTokens + usage[1].inputTokens)
  })

  test('404 before a transcript is captured, for an unknown session and for another Project', async () => {
    const queued = await queuedSession()
    expect((await get(`/o/quiet/p/_/sessions/${queued}/messages`, {}, quiet.token)).status).toBe(404)
    expect((await get(`/o/quiet/p/_/sessions/${queued}/trajectory`, {}, quiet.token)).status).toBe(404)
    expect(await json(await get(`/o/quiet/p/_/sessions/${queued}/tool-calls`, {}, quiet.token))).toEqual({ tool_calls: [] })
    expect((await get('/o/acme/p/_/sessions/nope/messages')).status).toBe(404)
    t.identity.createProject('acme', 'other', null)
    expect((await get(`/o/acme/p/other/sessions/${ids.harness_1}/messages`)).status).toBe(404)
    expect((await get(`/o/acme/p/web/sessions/${ids.harness_1}/messages`)).status).toBe(200)
    expect((await get(`/o/quiet/p/_/sessions/${ids.harness_1}/messages`, {}, quiet.token)).status).toBe(404)
    expect((await get(`${base('harness_1')}/messages`, {}, 'bogus')).status).toBe(401)
  })
})

/** An org whose plan admits no run, so its sessions stay queued with nothing captured. */
let quiet: { token: string }
async function queuedSession(): Promise<string> {
  if (!quiet) {
    t.identity.createOrg('quiet')
    quiet = t.identity.createUser('quiet', 'q@quiet.test', 'admin')
    t.plans.setPlan('quiet', { maxConcurrent: 0 })
  }
  const res = await t.app.handle(req('POST', '/o/quiet/p/_/sessions', { token: quiet.token, body: { agent: 'harness_1', prompt: 'wait' } }))
  const session = await json(res)
  expect(session.status).toBe('queued')
  return session.execution_id
}

describe('GET …/trajectory', () => {
  test('JSON metadata by default', async () => {
    for (const h of HARNESSES) {
      const body = await json(await get(`${base(h)}/trajectory`))
      expect(body).toMatchObject({ execution_id: ids[h], format: h, agent: h, key: `session_transcript_lines/${ids[h]}` })
      expect(body.bytes).toBeGreaterThan(0)
      expect(Number.isNaN(Date.parse(body.captured_at))).toBe(false)
    }
  })

  test('with Accept: application/x-ndjson, the raw stream as the CLI wrote it and its format', async () => {
    for (const h of HARNESSES) {
      const res = await get(`${base(h)}/trajectory`, { accept: 'application/x-ndjson' })
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toStartWith('application/x-ndjson')
      expect(res.headers.get('x-session-format')).toBe(h)
      const text = await res.text()
      const meta = await json(await get(`${base(h)}/trajectory`))
      expect(Buffer.byteLength(text)).toBe(meta.bytes)
      const first = JSON.parse(text.split('\n')[0]!)
      expect(first.type).toBe({ harness_1: 'system', harness_2: 'thread.started', harness_3: 'init' }[h])
    }
  })

  test('normalized events without a raw stream are served in the native format', async () => {
    const id = await queuedSession()
    const event = { type: 'message', agent: 'harness_1', timestamp: '2026-01-01T00:00:00.000Z', role: 'user', content: 'hi' }
    t.store.events.append(id, [{ turn: 1, kind: 'harness', type: 'message', data: event }])
    t.store.events.flush()
    const meta = await json(await get(`/o/quiet/p/_/sessions/${id}/trajectory`, {}, quiet.token))
    expect(meta).toMatchObject({ format: 'native', bytes: JSON.stringify(event).length + 1 })
    const raw = await get(`/o/quiet/p/_/sessions/${id}/trajectory`, { accept: 'application/x-ndjson' }, quiet.token)
    expect(raw.headers.get('x-session-format')).toBe('native')
    expect(JSON.parse(await raw.text())).toEqual(event)
  })

  test('404 for an unknown session and a caller outside the org', async () => {
    expect((await get('/o/acme/p/_/sessions/nope/trajectory')).status).toBe(404)
    t.identity.createOrg('other-org')
    const outsider = t.identity.createUser('other-org', 'x@other.test', 'admin')
    expect((await get(`${base('harness_1')}/trajectory`, {}, outsider.token)).status).toBe(404)
  })
})

describe('GET …/tool-calls', () => {
  test('filters by tool, program and outcome, and limits', async () => {
    const calls = async (q: string) => (await toolCalls('harness_1', q)).tool_calls.map((c: { ordinal: number }) => c.ordinal)
    expect(await calls('?tool=Bash')).toEqual([0, 1])
    expect(await calls('?tool=Write')).toEqual([2])
    expect(await calls('?program=head')).toEqual([0])
    expect(await calls('?program=false')).toEqual([1])
    expect(await calls('?program=nope')).toEqual([])
    expect(await calls('?outcome=error')).toEqual([1])
    expect(await calls('?outcome=success')).toEqual([0, 2])
    expect(await calls('?outcome=cancelled')).toEqual([])
    expect(await calls('?limit=2')).toEqual([0, 1])
    expect(await calls('?tool=Bash&outcome=success&program=ls')).toEqual([0])
    expect(await calls('?limit=1000')).toEqual([0, 1, 2])
  })

  test('400 for an unknown outcome or a limit outside 1..1000; 404 for an unknown session', async () => {
    for (const query of ['?outcome=maybe', '?limit=0', '?limit=1001', '?limit=two']) {
      expect((await get(`${base('harness_1')}/tool-calls${query}`)).status).toBe(400)
    }
    expect((await get('/o/acme/p/_/sessions/nope/tool-calls')).status).toBe(404)
  })
})

test('the three reads are in the OpenAPI document with their schemas', async () => {
  const doc = await json(await t.app.handle(req('GET', '/openapi.json')))
  const path = (p: string) => doc.paths[`/o/{org}/p/{project}/sessions/{session}/${p}`].get
  expect(path('messages').operationId).toBe('sessions.messages')
  expect(path('trajectory').operationId).toBe('sessions.trajectory')
  const toolCalls = path('tool-calls')
  expect(toolCalls.operationId).toBe('sessions.toolCalls')
  expect(Object.keys(toolCalls.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '404']))
  const item = toolCalls.responses['200'].content['application/json'].schema.properties.tool_calls.items
  expect(Object.keys(item.properties)).toEqual([
    'call_key',
    'ordinal',
    'tool',
    'program',
    'programs',
    'input',
    'outcome',
    'exit_code',
    'error_code',
    'end_timestamp',
  ])
})

test('API keys may read all three with runs:read; a key without it is 403 INSUFFICIENT_SCOPE', async () => {
  const key = async (scopes: string[]) =>
    (await json(await t.app.handle(req('POST', '/o/acme/api-keys', { token: t.admin.token, body: { name: `reader ${scopes}`, scopes } }))))
      .secret as string
  const [reader, writer] = [await key(['runs:read']), await key(['runs:write'])]
  for (const read of ['messages', 'trajectory', 'tool-calls']) {
    expect((await get(`${base('harness_3')}/${read}`, {}, reader)).status).toBe(200)
    const refused = await get(`${base('harness_3')}/${read}`, {}, writer)
    expect(refused.status).toBe(403)
    expect((await json(refused)).code).toBe('INSUFFICIENT_SCOPE')
  }
})
