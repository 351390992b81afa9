import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { BrowserContext } from 'playwright-core'
import { launchChromium } from '../helpers/chromium'
import { SESSION_STATUSES } from '../../src/domain/status'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

let t: TestApp
let base: string
let browser: BrowserContext
let artifacts: string
let chromium: Awaited<ReturnType<typeof launchChromium>>
beforeAll(async () => {
  t = await makeTestApp()
  base = t.listen()
  // The screenshot is a test artifact: it stays in the test's temp folder, not in the app's.
  artifacts = mkdtempSync(join(tmpdir(), 'agentd-statechart-'))
  chromium = await launchChromium({ width: 1600, height: 1400 })
  browser = chromium.browser
})
afterAll(async () => {
  await chromium?.close()
  await t[Symbol.asyncDispose]()
})

/** Opens a page as the signed-in admin and waits for Mermaid to have drawn the chart. */
async function open(path: string) {
  const page = await browser.newPage()
  await page.setExtraHTTPHeaders({ authorization: `Bearer ${t.admin.token}` })
  const external: string[] = []
  page.on('request', (r) => {
    if (!r.url().startsWith(base)) external.push(r.url())
  })
  const res = await page.goto(`${base}${path}`)
  expect(res?.status()).toBe(200)
  // The page marks <body data-rendered> once Mermaid has drawn (or failed to).
  await page.locator('body[data-rendered]').waitFor({ state: 'attached', timeout: 30_000 })
  expect(await page.locator('body').getAttribute('data-error')).toBeNull()
  expect(await page.locator('body').getAttribute('data-rendered')).toBe('true')
  expect(external).toEqual([])
  return page
}

/** The ids of the state nodes Mermaid drew, by state name. */
const stateNodes = (page: Awaited<ReturnType<typeof open>>): Promise<{ id: string; label: string; classes: string }[]> =>
  page.evaluate(
    `[...document.querySelectorAll('#chart svg g.node')].map((g) => ({ id: g.id, label: (g.textContent || '').trim(), classes: g.getAttribute('class') || '' }))`,
  )

test('/statechart in headless Chromium renders an SVG with one node per state', async () => {
  const page = await open('/statechart')
  expect(await page.locator('#chart svg').count()).toBe(1)
  const nodes = await stateNodes(page)
  for (const state of SESSION_STATUSES) expect(nodes.filter((n) => n.label === state)).toHaveLength(1)
  // Besides the states, only the start and end markers ([*]) are nodes.
  expect(nodes.filter((n) => n.label !== '')).toHaveLength(SESSION_STATUSES.length)
  const png = join(artifacts, 'statechart.png')
  await page.screenshot({ path: png, fullPage: true })
  const bytes = new Uint8Array(await Bun.file(png).arrayBuffer())
  expect([...bytes.slice(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  console.log(`statechart screenshot: ${png}`)
  await page.close()
}, 60_000)

test('?session=<id> highlights the session’s state and lists its transitions', async () => {
  const id = (
    await json(
      await t.app.handle(
        req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: script([{ answer: 'ok' }]) } }),
      ),
    )
  ).execution_id
  await waitFor(
    async () => t.store.get(id)!.status,
    (s) => s === 'completed',
  )
  const page = await open(`/statechart?session=${id}`)
  const nodes = await stateNodes(page)
  const current = nodes.filter((n) => /\bcurrent\b/.test(n.classes))
  expect(current.map((n) => n.label)).toEqual(['completed'])
  const history = await page.locator('#history tbody tr').allInnerTexts()
  expect(history.map((row) => row.split('\t').slice(1, 3))).toEqual([
    ['—', 'queued'],
    ['queued', 'allocating'],
    ['allocating', 'running'],
    ['running', 'completed'],
  ])
  const png = join(artifacts, 'statechart-session.png')
  await page.screenshot({ path: png, fullPage: true })
  console.log(`statechart screenshot (session ${id}): ${png}`)
  await page.close()
}, 60_000)

test('/docs renders the API reference in headless Chromium with the network off: every script and style is agentd’s own', async () => {
  const page = await browser.newPage()
  // Off the network: any request that is not to agentd itself is refused, and recorded.
  const external: string[] = []
  await page.route('**/*', (route) => {
    if (route.request().url().startsWith(base)) return route.continue()
    external.push(route.request().url())
    return route.abort('internetdisconnected')
  })
  const res = await page.goto(`${base}/docs`)
  expect(res?.status()).toBe(200)
  await page.locator('.swagger-ui .info .title').waitFor({ timeout: 30_000 })
  expect(await page.locator('.swagger-ui .info .title').innerText()).toContain('agentd')
  await page.locator('.opblock').first().waitFor({ timeout: 30_000 })
  expect(await page.locator('.opblock').count()).toBeGreaterThan(30)
  expect(external).toEqual([])
  const png = join(artifacts, 'docs.png')
  await page.screenshot({ path: png, fullPage: false })
  const bytes = new Uint8Array(await Bun.file(png).arrayBuffer())
  expect([...bytes.slice(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
  console.log(`docs screenshot: ${png}`)
  await page.close()
}, 60_000)
