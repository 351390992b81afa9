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
  expect(Object.keys(body.properties)).toEqual(expect.arrayContaining(['agent', 'prompt', 'model', 'effort', 'speed', 'mode', 'persistence', 'output_schema', 'on_pr', 'base_branch']))
  for (const path of ['/o/{org}/p/{project}/sessions/{session}', '/o/{org}/p/{project}/sessions/{session}/result', '/o/{org}/agents/available', '/healthz']) {
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
