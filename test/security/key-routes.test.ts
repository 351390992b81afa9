import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeKeyApp, type KeyApp } from '../helpers/keys'
import { json, req, script } from '../helpers/http'

/**
 * API keys act only on the session routes (spec section 5, contract section 11): every other
 * operation of the OpenAPI document answers a key 401 AUTH_FAILED, whatever the key's scopes.
 * The operations are read from the document the app serves, so a route added later is held to
 * the rule without this test changing; and every route the app registers under /o/ must be in
 * that document, so none can slip past it by being left out.
 */

let t: KeyApp
let secret: string
let session: string
beforeAll(async () => {
  t = await makeKeyApp()
  secret = (await t.createKey({ name: 'everywhere' })).body.secret
  const created = await t.call('POST', '/o/acme/p/_/sessions', secret, { agent: 'harness_2', prompt: script([{ answer: 'done' }]) })
  expect(created.status).toBe(202)
  session = created.body.execution_id
})
afterAll(() => t?.[Symbol.asyncDispose]())

/** A Project's sessions and everything under one session, and the org-wide search (contract section 5). */
const isSessionRoute = (path: string) => path === '/o/{org}/sessions' || /^\/o\/\{org\}\/p\/\{project\}\/sessions(\/|$)/.test(path)

interface Operation {
  method: string
  path: string
  security?: Record<string, string[]>[]
}

async function documentOperations(): Promise<Operation[]> {
  const doc = await json(await t.app.handle(req('GET', '/openapi.json')))
  const out: Operation[] = []
  for (const [path, item] of Object.entries(doc.paths as Record<string, Record<string, { security?: Operation['security'] }>>)) {
    for (const [method, op] of Object.entries(item))
      out.push({ method: method.toUpperCase(), path, ...(op.security ? { security: op.security } : {}) })
  }
  return out
}

/** Operations a bearer is asked for: the document's default (bearer), not the public or metrics-token ones. */
const needsBearer = (op: Operation) => op.security === undefined || op.security.some((s) => 'bearer' in s)

/** A path template filled in: the real Project and session, made-up names for everything else. */
function filled(path: string): string {
  const values: Record<string, string> = {
    org: 'acme',
    project: '_',
    session,
    agent: 'agent_000000000000000000000000',
    key: 'key_0',
    account: 'acct_0',
    connection: 'conn_0',
    name: 'NAME',
  }
  return path.replace(/\{(\w+)\}/g, (_, name: string) => values[name] ?? 'x')
}

async function withKey(method: string, path: string): Promise<{ status: number; code: unknown }> {
  const body = method === 'GET' || method === 'DELETE' ? undefined : {}
  const res = await t.app.handle(req(method, path, { token: secret, body }))
  // An event stream is not read to its end: its status and headers are the answer.
  if ((res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    await res.body?.cancel()
    return { status: res.status, code: null }
  }
  const text = await res.text()
  let parsed: { code?: unknown; error_code?: unknown } = {}
  try {
    parsed = JSON.parse(text)
  } catch {}
  return { status: res.status, code: parsed.code ?? parsed.error_code ?? null }
}

test('every route the app registers under /o/ is in the OpenAPI document', async () => {
  const documented = new Set((await documentOperations()).map((op) => `${op.method} ${op.path}`))
  const registered = (t.app.routes as { method: string; path: string }[])
    .filter((r) => r.path.startsWith('/o/'))
    // Named as the document names them (http/openapi-document.ts): the artifact wildcard is `{name}`.
    .map((r) => `${r.method} ${r.path.replace(/:(\w+)/g, '{$1}').replace(/\/\*$/, '/{name}')}`)
  expect(registered.length).toBeGreaterThan(20)
  expect(registered.filter((r) => !documented.has(r))).toEqual([])
})

test('a key on every operation that is not a session route is 401 AUTH_FAILED', async () => {
  const others = (await documentOperations()).filter((op) => needsBearer(op) && !isSessionRoute(op.path))
  // The findings' own routes are among them, with Projects, installations, secrets, environments, agents, accounts, connections, files.
  const keys = others.map((op) => `${op.method} ${op.path}`)
  for (const expected of [
    'POST /o/{org}/projects',
    'GET /o/{org}/projects',
    'GET /o/{org}/github',
    'PUT /o/{org}/projects/{project}/secrets/{name}',
    'PUT /o/{org}/projects/{project}/environment',
    'PATCH /o/{org}/agents/{agent}',
    'POST /o/{org}/accounts',
    'POST /o/{org}/connections',
    'POST /o/{org}/files',
    'POST /o/{org}/api-keys',
  ]) {
    expect(keys).toContain(expected)
  }
  const answers = []
  for (const op of others) answers.push({ op: `${op.method} ${op.path}`, ...(await withKey(op.method, filled(op.path))) })
  expect(answers.filter((a) => a.status !== 401 || a.code !== 'AUTH_FAILED')).toEqual([])
  // Refused before anything was done: no Project was made for the key.
  expect((await t.call('GET', '/o/acme/projects', t.admin.token)).body.data.map((p: { name: string }) => p.name)).toEqual(['web'])
})

test('the same key still works on every session route', async () => {
  const sessionOps = (await documentOperations()).filter((op) => isSessionRoute(op.path))
  expect(sessionOps.length).toBeGreaterThan(10)
  const answers = []
  // The PATCH last: it cancels the session the others read.
  const ordered = [...sessionOps.filter((op) => op.method !== 'PATCH'), ...sessionOps.filter((op) => op.method === 'PATCH')]
  for (const op of ordered) {
    const path = filled(op.path)
    const answer = op.method === 'PATCH' ? await t.call('PATCH', path, secret, { status: 'cancelled' }) : await withKey(op.method, path)
    answers.push({ op: `${op.method} ${op.path}`, status: answer.status })
  }
  expect(answers.filter((a) => a.status === 401 || a.status === 403)).toEqual([])
  expect(answers.find((a) => a.op === 'GET /o/{org}/p/{project}/sessions/{session}')?.status).toBe(200)
  expect(answers.find((a) => a.op === 'GET /o/{org}/sessions')?.status).toBe(200)
})
