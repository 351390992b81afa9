import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'

/**
 * The served OpenAPI document passes Redocly's linter with its recommended rules and no error
 * (issue "Operating and calling agentd", part 7), and says the media types of the bodies that
 * are not JSON.
 */

let t: TestApp
let doc: any
let dir: string
beforeAll(async () => {
  t = await makeTestApp()
  doc = await json(await t.app.handle(req('GET', '/openapi.json')))
  dir = mkdtempSync(join(tmpdir(), 'agentd-lint-'))
})
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true })
  await t?.[Symbol.asyncDispose]()
})

test('redocly lint (recommended rules) finds no error', async () => {
  const file = join(dir, 'openapi.json')
  writeFileSync(file, JSON.stringify(doc, null, 2))
  const cli = join(import.meta.dir, '../../node_modules/@redocly/cli/bin/cli.js')
  const lint = Bun.spawn([process.execPath, cli, 'lint', file, '--format=json'], {
    cwd: dir,
    env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [out, code] = await Promise.all([new Response(lint.stdout).text(), lint.exited])
  const report = JSON.parse(out.slice(out.indexOf('{'))) as {
    totals: { errors: number }
    problems: { ruleId: string; severity: string; message: string }[]
  }
  expect(report.problems.filter((p) => p.severity === 'error')).toEqual([])
  expect(report.totals.errors).toBe(0)
  expect(code).toBe(0)
})

test('bodies that are not JSON say so: the event stream, artifact bytes, the HTML chart, the raw trajectory, uploads; a 204 has no body', () => {
  const ok = (path: string, method = 'get') => Object.keys(doc.paths[path][method].responses['200'].content)
  expect(ok('/o/{org}/p/{project}/sessions/{session}/events')).toEqual(['text/event-stream'])
  expect(ok('/o/{org}/p/{project}/sessions/{session}/artifacts/{name}')).toEqual(['application/octet-stream'])
  expect(ok('/statechart')).toEqual(['text/html'])
  expect(ok('/o/{org}/p/{project}/sessions/{session}/trajectory')).toEqual(['application/json', 'application/x-ndjson'])
  expect(Object.keys(doc.paths['/o/{org}/files'].post.requestBody.content)).toEqual(['multipart/form-data'])
  expect(doc.paths['/o/{org}/api-keys/{key}'].delete.responses['204'].content).toBeUndefined()
  // Every other request body is JSON.
  for (const [path, operations] of Object.entries<Record<string, { requestBody?: { content: Record<string, unknown> } }>>(doc.paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      if (!operation.requestBody || path === '/o/{org}/files') continue
      expect({ route: `${method} ${path}`, media: Object.keys(operation.requestBody.content) }).toEqual({
        route: `${method} ${path}`,
        media: ['application/json'],
      })
    }
  }
})
