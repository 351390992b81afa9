import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mermaidChart } from '../../machines/chart'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
})
afterAll(() => t[Symbol.asyncDispose]())

const get = (path: string, token?: string) => t.app.handle(req('GET', path, { token }))
const unescape = (html: string) => html.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&amp;/g, '&')

describe('GET /statechart', () => {
  test('an HTML page with the generated diagram and agentd’s own Mermaid script', async () => {
    const res = await get('/statechart', t.member.token)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toContain('text/html')
    const html = await res.text()
    const chart = /<pre class="mermaid" id="chart">\n([\s\S]*?)\n<\/pre>/.exec(html)![1]!
    expect(unescape(chart)).toBe(mermaidChart())
    expect(html).toContain('<script src="/statechart/mermaid.min.js"></script>')
    expect(html).not.toMatch(/https?:\/\/(?!localhost)/)
    const script = await get('/statechart/mermaid.min.js', t.member.token)
    expect(script.status).toBe(200)
    expect(script.headers.get('content-type')).toContain('javascript')
    expect((await script.text()).length).toBeGreaterThan(1_000_000)
  })

  test('?session=<id>: its state highlighted and its transitions from the persisted status events, with times', async () => {
    const created = await json(await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: script([{ answer: 'ok' }]) } })))
    const id = created.execution_id as string
    await waitFor(async () => (await json(await get(`/o/acme/p/_/sessions/${id}`, t.admin.token))).status, (s) => s === 'completed')
    const html = await (await get(`/statechart?session=${id}`, t.member.token)).text()
    expect(html).toContain('data-status="completed"')
    expect(unescape(/<pre class="mermaid" id="chart">\n([\s\S]*?)\n<\/pre>/.exec(html)![1]!)).toBe(mermaidChart(undefined, { highlight: 'completed' }))
    const rows = [...html.matchAll(/<tr><td><time datetime="([^"]+)">[^<]+<\/time><\/td><td>([^<]+)<\/td><td>([^<]+)<\/td><td>(\d+)<\/td><\/tr>/g)]
    expect(rows.map((r) => [r[2], r[3]])).toEqual([
      ['—', 'queued'],
      ['queued', 'allocating'],
      ['allocating', 'running'],
      ['running', 'completed'],
    ])
    const stored = t.store.allEvents(id).filter((e) => e.kind === 'status')
    expect(rows.map((r) => r[1])).toEqual(stored.map((e) => new Date(e.createdAt).toISOString()))
  })

  test('404 for an unknown session or one in an org the caller is not in; 401 without a token or with an API key', async () => {
    expect((await get('/statechart?session=00000000-0000-0000-0000-000000000000', t.admin.token)).status).toBe(404)
    t.identity.createOrg('other')
    const outsider = t.identity.createUser('other', 'outsider@other.test', 'admin')
    const id = (await json(await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: 'hi' } })))).execution_id
    const foreign = await get(`/statechart?session=${id}`, outsider.token)
    expect(foreign.status).toBe(404)
    expect(await json(foreign)).toEqual({ error: 'Session not found', requestId: expect.stringMatching(/^req_/) })
    expect((await get('/statechart')).status).toBe(401)
    expect((await get('/statechart/mermaid.min.js')).status).toBe(401)
    const created = await t.app.handle(req('POST', '/o/acme/api-keys', { token: t.admin.token, body: { name: 'k', scopes: ['runs:read'] } }))
    expect(created.status).toBe(201)
    const key = (await json(created)).secret as string
    expect((await get(`/o/acme/p/_/sessions/${id}`, key)).status).toBe(200)
    expect((await get('/statechart', key)).status).toBe(401)
  })
})
