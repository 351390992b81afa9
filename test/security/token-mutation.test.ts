import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, waitFor } from '../helpers/http'
import { rawHttp } from './raw-http'

/**
 * A credential one byte away from a valid one is no credential: every byte of a valid signed-in
 * token and of a valid API key is changed, the token is cut at every length and characters are
 * added at both ends, and each variant is sent to every authenticated operation of the OpenAPI
 * document. Every answer must be 401. (A fuzzer once saw a token with one character appended
 * answered 200 on GET /o/{org}/sessions.)
 */
let t: TestApp
let sessionId: string
let apiKey: string
let keyId: string
let operations: { method: string; path: string; body: boolean }[]

beforeAll(async () => {
  t = await makeTestApp()
  const created = await json(
    await t.app.handle(req('POST', '/o/acme/p/web/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: 'hello' } })),
  )
  sessionId = created.execution_id
  await waitFor(
    () => t.app.handle(req('GET', `/o/acme/p/web/sessions/${sessionId}`, { token: t.admin.token })).then(json),
    (s) => s.status === 'completed',
    60_000,
  )
  const key = await json(
    await t.app.handle(
      req('POST', '/o/acme/api-keys', { token: t.admin.token, body: { name: 'mutated', scopes: ['runs:read', 'runs:write'] } }),
    ),
  )
  apiKey = key.secret
  keyId = key.id
  expect(apiKey).toStartWith('sk_live_')
  const doc = await json(await t.app.handle(req('GET', '/openapi.json')))
  operations = Object.entries<Record<string, { security?: unknown[]; requestBody?: unknown }>>(doc.paths).flatMap(([path, ops]) =>
    Object.entries(ops)
      // Operations that declare `security: []` take no credential (health, the docs); /metrics
      // takes the operator's metrics token, not a user's or a key's.
      .filter(([, op]) => !(Array.isArray(op.security) && !op.security.some((s) => typeof s === 'object' && s !== null && 'bearer' in s)))
      .map(([method, op]) => ({ method: method.toUpperCase(), path, body: op.requestBody !== undefined })),
  )
}, 90_000)
afterAll(() => t[Symbol.asyncDispose]())

/**
 * Path values for the operations. Writes name a key that does not exist and carry a body that
 * breaks the schema, so the valid credential's control answer is a 4xx that changes nothing
 * (a 404 or 400 past authentication), while the reads name the real session.
 */
function fill(op: { method: string; path: string }): string {
  const values: Record<string, string> = {
    org: 'acme',
    project: 'web',
    session: sessionId,
    key: op.method === 'GET' ? keyId : 'no-such-key',
    account: 'acct_none',
    agent: 'agent_none',
    connection: 'conn_none',
    name: 'none.txt',
  }
  return op.path.replace(/\{(\w+)\}|\*/g, (_, name: string | undefined) => values[name ?? '*']!)
}

async function call(op: { method: string; path: string; body: boolean }, authorization: string): Promise<number> {
  const headers: Record<string, string> = { authorization }
  let body: string | undefined
  if (op.body) {
    headers['content-type'] = 'application/json'
    body = '{"not_a_field": true}'
  }
  const res = await t.app.handle(new Request(`http://localhost${fill(op)}`, { method: op.method, headers, body }))
  // Streams (events) and files must not stay open.
  await res.body?.cancel()
  return res.status
}

/**
 * Every variant of `token` one edit away: each character changed (to its neighbour code point and,
 * for letters, to the other case), every proper prefix, and characters added at either end. HTTP
 * whitespace (space, tab) is left out: a header value's ends are trimmed by HTTP itself, so
 * `token<space>` is the same credential on the wire. U+00A0 and U+0085 are in: they are bytes a
 * client can send (obs-text), and JavaScript's `\s` counts U+00A0 as whitespace.
 */
function mutations(token: string): string[] {
  const out = new Set<string>()
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i)
    const ch = token[i]!
    // A neighbouring byte (0 for 1, ` for a); for letters also the other case.
    const flipped = c ^ 1
    const swaps = [flipped > 0x20 && flipped < 0x7f ? flipped : c + 1]
    if (ch.toLowerCase() !== ch.toUpperCase()) swaps.push((ch === ch.toLowerCase() ? ch.toUpperCase() : ch.toLowerCase()).charCodeAt(0))
    for (const swap of swaps) out.add(token.slice(0, i) + String.fromCharCode(swap) + token.slice(i + 1))
    out.add(token.slice(0, i))
  }
  for (const extra of ['a', 'Z', '0', '_', '-', '.', '=', '~', '/', '+', '\u00a0', '\u0085', '\u00ff', '\x7f']) out.add(token + extra)
  for (const extra of ['a', '.', '\u00a0', '\u0085']) out.add(extra + token)
  out.delete(token)
  return [...out]
}

async function attack(kind: string, token: string, accepts: (op: { method: string; path: string }) => boolean) {
  // Control: the unmutated credential gets past authentication where it may call the operation,
  // so a 401 below is the mutation's doing.
  const controls: string[] = []
  for (const op of operations) {
    const status = await call(op, `Bearer ${token}`)
    if (accepts(op) && status === 401) controls.push(`${op.method} ${op.path}: ${status}`)
  }
  expect(controls).toEqual([])
  const variants = mutations(token)
  expect(variants.length).toBeGreaterThan(token.length * 2)
  const passed: string[] = []
  let sent = 0
  for (const variant of variants) {
    for (const op of operations) {
      sent++
      const status = await call(op, `Bearer ${variant}`)
      if (status !== 401) passed.push(`${op.method} ${op.path} with ${JSON.stringify(variant)}: ${status}`)
    }
  }
  console.log(`${kind}: ${variants.length} variants × ${operations.length} operations = ${sent} requests`)
  expect(passed).toEqual([])
}

test('every one-edit variant of a signed-in token is 401 on every operation', async () => {
  expect(operations.length).toBeGreaterThan(20)
  await attack('user token', t.admin.token, () => true)
}, 60_000)

test('every one-edit variant of an API key is 401 on every operation', async () => {
  // Keys may call the session routes (spec section 5); elsewhere the valid key is 401 too.
  await attack('API key', apiKey, (op) => op.path.startsWith('/o/{org}/p/') || op.path === '/o/{org}/sessions')
}, 60_000)

test('a malformed Authorization header is 401, never 2xx or 500', async () => {
  const get = operations.find((op) => op.method === 'GET' && op.path === '/o/{org}/sessions')!
  const headers = [
    '',
    'Bearer',
    'Bearer ',
    `bearer${t.admin.token}`,
    `Basic ${t.admin.token}`,
    `Bearer ${t.admin.token} ${t.admin.token}`,
    `Bearer ${t.admin.token},x`,
    `${t.admin.token}`,
    `Token ${t.admin.token}`,
  ]
  for (const header of headers) expect({ header, status: await call(get, header) }).toEqual({ header, status: 401 })
})

test('over a real connection, the byte 0xA0 before or after a valid token is 401', async () => {
  // Sent as raw bytes: the fuzzer's case, which a client library would have re-encoded as UTF-8.
  const port = Number(new URL(t.listen()).port)
  const get = (authorization: string) => ({ head: `GET /o/acme/sessions HTTP/1.1\r\nhost: localhost\r\nauthorization: ${authorization}` })
  const token = t.admin.token
  const answers = await rawHttp(port, [
    get(`Bearer ${token}`),
    get(`Bearer ${token}\u00a0`),
    get(`Bearer \u00a0${token}`),
    get(`Bearer ${apiKey}\u00a0`),
  ])
  expect(answers.map((runs) => runs[0]!.status)).toEqual([200, 401, 401, 401])
}, 60_000)
