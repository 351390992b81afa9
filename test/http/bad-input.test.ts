import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, waitFor } from '../helpers/http'

/**
 * Every operation of the OpenAPI document, fed bad input one part at a time (each path parameter,
 * each query parameter, the body), must answer with a 4xx in one of the spec's error envelopes:
 * a 500 is a bug, whatever the caller sent.
 */
let t: TestApp
let sessionId: string
let keyId: string
let operations: { method: string; path: string; query: string[]; body: boolean }[]

beforeAll(async () => {
  t = await makeTestApp()
  const created = await json(
    await t.app.handle(req('POST', '/o/acme/p/web/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: 'hello' } })),
  )
  sessionId = created.execution_id
  await waitFor(
    () => t.app.handle(req('GET', `/o/acme/p/web/sessions/${sessionId}`, { token: t.admin.token })).then(json),
    (s) => s.status === 'completed',
  )
  keyId = (await json(await t.app.handle(req('POST', '/o/acme/api-keys', { token: t.admin.token, body: { name: 'probe' } })))).id
  const doc = await json(await t.app.handle(req('GET', '/openapi.json')))
  operations = Object.entries<Record<string, { parameters?: { in: string; name: string }[]; requestBody?: unknown }>>(doc.paths).flatMap(
    ([path, ops]) =>
      Object.entries(ops).map(([method, op]) => ({
        method: method.toUpperCase(),
        path,
        query: (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name),
        body: op.requestBody !== undefined,
      })),
  )
})
afterAll(() => t[Symbol.asyncDispose]())

const WEIRD = [
  '',
  'x',
  '-1',
  '0',
  '1e999',
  '99999999999999999999999',
  'null',
  '[]',
  '{}',
  '%00',
  '%E2%9C%93',
  '..%2F..',
  'a'.repeat(2000),
  "'; DROP TABLE sessions; --",
]
const BODIES = [
  '{',
  'null',
  '[]',
  '"text"',
  '123',
  'true',
  '{}',
  '{"status": {"$ne": 1}}',
  JSON.stringify({ content: { a: 1 }, name: ['x'], status: 7, prompt: null }),
  `{"prompt": "${'p'.repeat(300_000)}"}`,
]
const VALID: Record<string, () => string> = {
  org: () => 'acme',
  project: () => 'web',
  session: () => sessionId,
  key: () => keyId,
  account: () => 'acct_none',
  agent: () => 'agent_none',
  connection: () => 'conn_none',
  name: () => 'none.txt',
  '*': () => 'none.txt',
}

function fill(path: string, bad?: { name: string; value: string }): string {
  return path.replace(/\{(\w+)\}|\*/g, (whole, name: string | undefined) => {
    const param = name ?? '*'
    return bad?.name === param ? bad.value : VALID[param]!()
  })
}

/** Sends one request and checks the answer: below 500, and a 4xx carries an error envelope. */
async function probe(method: string, path: string, body?: string, contentType = 'application/json'): Promise<string | null> {
  const headers: Record<string, string> = { authorization: `Bearer ${t.admin.token}` }
  if (body !== undefined) headers['content-type'] = contentType
  const res = await t.app.handle(new Request(`http://localhost${path}`, { method, headers, body }))
  const what = `${method} ${path.slice(0, 120)}${body === undefined ? '' : ` ${body.slice(0, 60)}`}`
  if (res.status >= 500) return `${what}: ${res.status} ${(await res.text()).slice(0, 200)}`
  if (res.status < 400) {
    await res.body?.cancel()
    return null
  }
  const text = await res.text()
  let parsed: Record<string, unknown>
  try {
    parsed = JSON.parse(text)
  } catch {
    return `${what}: ${res.status} is not JSON: ${text.slice(0, 200)}`
  }
  const envelope = typeof parsed.error === 'string' || (typeof parsed.code === 'string' && typeof parsed.message === 'string')
  return envelope ? null : `${what}: ${res.status} without an error envelope: ${text.slice(0, 200)}`
}

test('no operation answers 500 or leaves the error envelope, whatever the path, query or body', async () => {
  const problems: string[] = []
  let sent = 0
  const check = async (...args: Parameters<typeof probe>) => {
    sent++
    const problem = await probe(...args)
    if (problem) problems.push(problem)
  }
  expect(operations.length).toBeGreaterThan(20)
  for (const op of operations) {
    const base = fill(op.path)
    for (const name of [...op.path.matchAll(/\{(\w+)\}|\*/g)].map((m) => m[1] ?? '*')) {
      for (const value of WEIRD) if (value !== '') await check(op.method, fill(op.path, { name, value }), op.body ? '{}' : undefined)
    }
    for (const name of [...op.query, 'unknown']) {
      for (const value of WEIRD) await check(op.method, `${base}?${name}=${value}`, op.body ? '{}' : undefined)
      await check(op.method, `${base}?${name}=1&${name}=2`, op.body ? '{}' : undefined)
    }
    if (op.body) {
      for (const body of BODIES) await check(op.method, base, body)
      await check(op.method, base, 'content=hi', 'application/x-www-form-urlencoded')
      await check(op.method, base, 'hi', 'text/plain')
      await check(op.method, base, '')
    }
  }
  console.log(`bad input: ${sent} requests to ${operations.length} operations`)
  expect(problems).toEqual([])
}, 120_000)
