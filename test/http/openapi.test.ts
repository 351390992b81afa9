import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { readFileSync } from 'node:fs'
import { json, req } from '../helpers/http'
import { operations } from '../helpers/openapi'

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
})
afterAll(() => t[Symbol.asyncDispose]())

test('GET /openapi.json is OpenAPI 3.1.0, version 1.0.0, generated from the route schemas', async () => {
  const res = await t.app.handle(req('GET', '/openapi.json'))
  expect(res.status).toBe(200)
  const doc = await json(res)
  expect(doc.openapi).toBe('3.1.0')
  expect(doc.info.version).toBe('1.0.0')
  const create = doc.paths['/o/{org}/p/{project}/sessions'].post
  expect(create.operationId).toBe('sessions.create')
  expect(Object.keys(create.responses)).toEqual(expect.arrayContaining(['202', '400', '401', '404', '422']))
  const body = create.requestBody.content['application/json'].schema
  expect(Object.keys(body.properties)).toEqual(
    expect.arrayContaining(['agent', 'prompt', 'model', 'effort', 'speed', 'mode', 'persistence', 'output_schema', 'on_pr', 'base_branch']),
  )
  for (const path of [
    '/o/{org}/p/{project}/sessions/{session}',
    '/o/{org}/p/{project}/sessions/{session}/result',
    '/o/{org}/agents/available',
    '/healthz',
  ]) {
    expect(doc.paths[path]).toBeDefined()
  }
})

test('every path and operation is as the fixture holds it, components aside (regenerate the fixture only for an intended API change)', async () => {
  // A fresh process's document (`bun run openapi`): this process's apps have compiled shared schemas.
  const run = Bun.spawn([process.execPath, 'scripts/openapi.ts'], { cwd: `${import.meta.dir}/../..`, stdout: 'pipe', stderr: 'pipe' })
  const [out, err, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited])
  expect({ code, err }).toEqual({ code: 0, err: '' })
  const doc = JSON.parse(out)
  const fixture = JSON.parse(readFileSync(`${import.meta.dir}/../fixtures/openapi-operations.json`, 'utf8'))
  const now = operations(doc)
  expect(Object.keys(now)).toEqual(Object.keys(fixture))
  for (const key of Object.keys(fixture)) expect({ [key]: now[key] }).toEqual({ [key]: fixture[key] })
})

test('/docs serves the API reference page', async () => {
  const res = await t.app.handle(req('GET', '/docs'))
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toContain('text/html')
})

test('unknown routes are 404 in the error envelope', async () => {
  const res = await t.app.handle(req('GET', '/nope', { token: t.admin.token }))
  expect(res.status).toBe(404)
  expect(await json(res)).toEqual({ error: 'Not found', requestId: expect.stringMatching(/^req_/) })
})

test('saved agents, Projects, provider accounts, connections, files and usage are named components, and each route answering one refers to it by name', async () => {
  const doc = await json(await t.app.handle(req('GET', '/openapi.json')))
  const fields: Record<string, string[]> = {
    SavedAgent: [
      'id',
      'name',
      'revision',
      'digest',
      'catalog_revision',
      'catalog_current',
      'harness',
      'model',
      'effort',
      'speed',
      'instructions',
      'skills',
      'connections',
      'created_at',
      'updated_at',
    ],
    Project: ['id', 'name', 'repository', 'github_installation', 'created_at'],
    ProviderAccount: ['id', 'provider', 'name', 'key_hint', 'created_at'],
    Connection: ['id', 'name', 'url', 'project_id', 'connector', 'auth_mode', 'status', 'created_at'],
    ConnectionSignIn: ['id', 'name', 'url', 'project_id', 'connector', 'auth_mode', 'status', 'created_at', 'authorization_url'],
    UploadedFile: ['id', 'name', 'mime', 'size', 'expired_at'],
    Usage: ['plan', 'usage', 'limits'],
  }
  // `METHOD path status`: the resource itself, or `list` of it in `data`.
  const answers: Record<string, [string, 'one' | 'list'][]> = {
    SavedAgent: [
      ['POST /o/{org}/agents 201', 'one'],
      ['GET /o/{org}/agents 200', 'list'],
      ['GET /o/{org}/agents/{agent} 200', 'one'],
      ['PATCH /o/{org}/agents/{agent} 200', 'one'],
    ],
    Project: [
      ['GET /o/{org}/projects 200', 'list'],
      ['POST /o/{org}/projects 201', 'one'],
    ],
    ProviderAccount: [
      ['GET /o/{org}/accounts 200', 'list'],
      ['POST /o/{org}/accounts 201', 'one'],
    ],
    Connection: [
      ['GET /o/{org}/connections 200', 'list'],
      ['POST /o/{org}/connections/callback 200', 'one'],
    ],
    ConnectionSignIn: [['POST /o/{org}/connections/{connection}/sign-in 200', 'one']],
    UploadedFile: [['POST /o/{org}/files 201', 'one']],
    Usage: [['GET /o/{org}/usage 200', 'one']],
  }
  for (const [name, keys] of Object.entries(fields)) {
    const component = doc.components.schemas[name]
    expect({ name, type: component?.type, fields: Object.keys(component?.properties ?? {}) }).toEqual({
      name,
      type: 'object',
      fields: keys,
    })
    const ref = { $ref: `#/components/schemas/${name}` }
    for (const [route, shape] of answers[name]!) {
      const [method, path, status] = route.split(' ') as [string, string, string]
      const schema = doc.paths[path][method.toLowerCase()].responses[status].content['application/json'].schema
      const expected = shape === 'one' ? ref : { type: 'object', required: ['data'], properties: { data: { type: 'array', items: ref } } }
      expect({ route, schema }).toEqual({ route, schema: expected })
    }
    // An inlined model keeps its `$id`: no operation holds a copy of this one.
    expect(JSON.stringify(doc.paths)).not.toContain(`"$id":"#/components/schemas/${name}"`)
  }
  // A create answers a stored tool server, or a connector with the address its owner signs in at.
  const created = doc.paths['/o/{org}/connections'].post.responses['201'].content['application/json'].schema
  expect(created).toEqual({ anyOf: [{ $ref: '#/components/schemas/ConnectionSignIn' }, { $ref: '#/components/schemas/Connection' }] })
})

test('a saved agent reads back the same created, got and listed, through the routes that refer to SavedAgent', async () => {
  const created = await t.app.handle(
    req('POST', '/o/acme/agents', { token: t.admin.token, body: { name: 'named-model', harness: 'harness_2' } }),
  )
  expect(created.status).toBe(201)
  const agent = await json(created)
  const read = await t.app.handle(req('GET', `/o/acme/agents/${agent.id}`, { token: t.admin.token }))
  expect(await json(read)).toEqual(agent)
  const listed = await t.app.handle(req('GET', '/o/acme/agents', { token: t.admin.token }))
  expect(listed.status).toBe(200)
  expect((await json(listed)).data).toContainEqual(agent)
})
