import { afterAll, beforeAll, expect, test } from 'bun:test'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'

/**
 * A shape B image block names a URL agentd fetches at create time: the webhook SSRF rules hold
 * (spec 4.1). An inside server counts every connection made to it; no attack may make one.
 */

let t: TestApp
let inside: Server
let port: number
let hits = 0
beforeAll(async () => {
  inside = createServer((_request, response) => response.writeHead(200, { 'content-type': 'image/png' }).end('secret'))
  // Connections, not requests: an https attempt on this plain server would never make a request.
  inside.on('connection', () => hits++)
  await new Promise<void>((resolve) => inside.listen(0, '127.0.0.1', resolve))
  port = (inside.address() as AddressInfo).port
  // `rebound.example` resolves to a public address and an inside one; `inside.example` only inside.
  t = await makeTestApp(
    {},
    {
      resolveHost: async (host) =>
        host === 'rebound.example' ? ['93.184.216.34', '127.0.0.1'] : host === 'inside.example' ? ['10.0.0.7'] : [],
    },
  )
})
afterAll(async () => {
  inside?.close()
  await t?.[Symbol.asyncDispose]()
})

test('an image URL on loopback, a private or metadata address, a name resolving inside, or plain http is 422 and nothing is fetched', async () => {
  for (const url of [
    `https://127.0.0.1:${port}/a.png`,
    `https://[::1]:${port}/a.png`,
    'https://169.254.169.254/latest/meta-data.png',
    'https://10.0.0.7/a.png',
    `https://inside.example:${port}/a.png`,
    `https://rebound.example:${port}/a.png`,
    `http://127.0.0.1:${port}/a.png`,
    'https://unresolvable.example/a.png',
    'file:///etc/passwd',
  ]) {
    const res = await t.app.handle(
      req('POST', '/o/acme/p/_/sessions', {
        token: t.admin.token,
        body: {
          harness: 'harness_1',
          input: [
            { type: 'text', text: 't' },
            { type: 'image', source: { type: 'url', url } },
          ],
        },
      }),
    )
    const body = await json(res)
    expect({ url, status: res.status, code: body.code }).toEqual({ url, status: 422, code: 'ATTACHMENT_FETCH_FAILED' })
  }
  expect(hits).toBe(0)
})

test('a skill URL is fetched under the same rules: inside addresses are 422 SKILL_FETCH_FAILED, http is no skill URL, and nothing is fetched', async () => {
  const cases: [string, string][] = [
    [`https://127.0.0.1:${port}/SKILL.md`, 'SKILL_FETCH_FAILED'],
    [`https://rebound.example:${port}/skill.zip`, 'SKILL_FETCH_FAILED'],
    ['https://169.254.169.254/SKILL.md', 'SKILL_FETCH_FAILED'],
    // Not https: not a skill URL at all.
    [`http://127.0.0.1:${port}/SKILL.md`, 'SKILL_INVALID'],
  ]
  for (const [url, code] of cases) {
    const res = await t.app.handle(
      req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { harness: 'harness_1', input: 't', skills: [url] } }),
    )
    const body = await json(res)
    expect({ url, status: res.status, code: body.code }).toEqual({ url, status: 422, code })
  }
  expect(hits).toBe(0)
})

test('a tool server URL is held to the same rules: inside addresses are 422 MCP_SERVER_URL_INVALID, for a run and for a stored connection', async () => {
  for (const url of [
    `https://127.0.0.1:${port}/mcp`,
    `https://rebound.example:${port}/mcp`,
    'https://169.254.169.254/mcp',
    `http://127.0.0.1:${port}/mcp`,
  ]) {
    const run = await t.app.handle(
      req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { harness: 'harness_1', input: 't', connections: [{ url }] } }),
    )
    expect({ url, status: run.status, code: (await json(run)).code }).toEqual({ url, status: 422, code: 'MCP_SERVER_URL_INVALID' })
    const stored = await t.app.handle(req('POST', '/o/acme/connections', { token: t.admin.token, body: { name: 'inside', url } }))
    expect({ url, status: stored.status, code: (await json(stored)).code }).toEqual({ url, status: 422, code: 'MCP_SERVER_URL_INVALID' })
  }
  expect(hits).toBe(0)
})
