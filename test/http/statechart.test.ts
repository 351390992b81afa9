import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mermaidChart } from '../../machines/chart'
import { SESSION_STATUSES } from '../../src/domain/status'
import { chartSourceDigest, readChart } from '../../src/statechart/chart-file'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
})
afterAll(() => t[Symbol.asyncDispose]())

const get = (path: string, token?: string) => t.app.handle(req('GET', path, { token }))

describe('GET /statechart', () => {
  test('an HTML page with the drawing `bun run chart` made of this machine, and no script', async () => {
    // The committed drawing is of the machine as it is now (else: `bun run chart`).
    expect(readChart().digest).toBe(chartSourceDigest(mermaidChart()))
    const res = await get('/statechart', t.member.token)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toContain('text/html')
    const html = await res.text()
    expect(html).toContain(readChart().svg.trim())
    for (const state of SESSION_STATUSES) expect(html).toMatch(new RegExp(`id="lifecycle-state-${state}-\\d+"`))
    expect(html).not.toContain('<script')
    expect(html).not.toMatch(/ (src|href)="https?:/)
    expect((await get('/statechart/mermaid.min.js', t.member.token)).status).toBe(404)
  })

  test('?session=<id>: its state highlighted and its transitions from the persisted status events, with times', async () => {
    const created = await json(
      await t.app.handle(
        req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: script([{ answer: 'ok' }]) } }),
      ),
    )
    const id = created.execution_id as string
    await waitFor(
      async () => (await json(await get(`/o/acme/p/_/sessions/${id}`, t.admin.token))).status,
      (s) => s === 'completed',
    )
    const html = await (await get(`/statechart?session=${id}`, t.member.token)).text()
    expect(html).toContain('data-status="completed"')
    expect([...html.matchAll(/<g class="([^"]*\bcurrent\b[^"]*)" id="lifecycle-state-(\w+)-\d+"/g)].map((m) => m[2])).toEqual(['completed'])
    const rows = [
      ...html.matchAll(/<tr><td><time datetime="([^"]+)">[^<]+<\/time><\/td><td>([^<]+)<\/td><td>([^<]+)<\/td><td>(\d+)<\/td><\/tr>/g),
    ]
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
    const id = (
      await json(
        await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: 'hi' } })),
      )
    ).execution_id
    const foreign = await get(`/statechart?session=${id}`, outsider.token)
    expect(foreign.status).toBe(404)
    expect(await json(foreign)).toEqual({ error: 'Session not found', requestId: expect.stringMatching(/^req_/) })
    expect((await get('/statechart')).status).toBe(401)
    const created = await t.app.handle(
      req('POST', '/o/acme/api-keys', { token: t.admin.token, body: { name: 'k', scopes: ['runs:read'] } }),
    )
    expect(created.status).toBe(201)
    const key = (await json(created)).secret as string
    expect((await get(`/o/acme/p/_/sessions/${id}`, key)).status).toBe(200)
    expect((await get('/statechart', key)).status).toBe(401)
  })
})
