import { afterAll, beforeAll, expect, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { launchChromium } from '../helpers/chromium'
import { makeTestApp, type TestApp } from '../helpers/app'
import type { TestMcpServer } from '../helpers/mcp-server'
import { connectorEntry, startOauthServer, startProtectedMcp, type OauthServer } from '../helpers/oauth-server'

/**
 * The console connects a built-in connector end to end in headless Chromium: the Connect button
 * sends the browser to the authorization server's own sign-in and consent pages (oidc-provider),
 * which send it back to the console's callback page; the connection is then ready, and the
 * tokens never reach the page. Every page passes axe.
 */
const AXE = readFileSync(join(import.meta.dir, '../../node_modules/axe-core/axe.min.js'), 'utf8')
let t: TestApp
let base: string
let oauth: OauthServer
let mcp: TestMcpServer
let configDir: string
let chromium: Awaited<ReturnType<typeof launchChromium>>
beforeAll(async () => {
  oauth = await startOauthServer({ accessTokenTtl: 300 })
  mcp = startProtectedMcp(oauth)
  configDir = mkdtempSync(join(tmpdir(), 'agentd-console-connectors-'))
  const config = join(configDir, 'agentd.json')
  writeFileSync(
    config,
    JSON.stringify({
      accounts: { encryption_key: randomBytes(32).toString('base64') },
      catalog: { mcp_servers: [connectorEntry('tickets', 'Tickets', mcp.url)] },
    }),
  )
  // The console's address must be known before the start: the sign-in comes back to it.
  const probe = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response() })
  const port = probe.port!
  probe.stop(true)
  t = await makeTestApp({ AGENTD_CONFIG: config, AGENTD_WEBHOOK_ALLOW_PRIVATE: '1', AGENTD_PUBLIC_URL: `http://127.0.0.1:${port}` })
  base = t.listen(port)
  chromium = await launchChromium({ width: 1280, height: 900 })
})
afterAll(async () => {
  await chromium?.close()
  await t?.[Symbol.asyncDispose]()
  mcp?.stop()
  await oauth?.stop()
  rmSync(configDir, { recursive: true, force: true })
})

test('Connect: the provider’s sign-in and consent, back to the console, the connector ready; its tokens never in the page', async () => {
  const page = await chromium.browser.newPage()
  page.setDefaultTimeout(90_000)
  const scan = async (name: string) => {
    await page.evaluate(AXE)
    const found = (await page.evaluate("axe.run(document, { resultTypes: ['violations'] })")) as {
      violations: { id: string; impact: string }[]
    }
    const serious = found.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => v.id)
    expect({ page: name, serious }).toEqual({ page: name, serious: [] })
  }
  const bodies: string[] = []
  page.on('response', async (r) => {
    if (r.url().startsWith(`${base}/o/`)) bodies.push(await r.text().catch(() => ''))
  })
  await page.goto(`${base}/console`)
  await page.getByLabel('Your token').fill(t.admin.token)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('link', { name: 'Connections' }).click()
  await page.getByRole('heading', { name: 'Built-in connectors' }).waitFor()
  await page.getByText('You have no connections in this org yet.').waitFor()
  await scan('connections')
  await page.getByRole('button', { name: 'Connect Tickets' }).click()
  // The authorization server's own pages: any login, any password, then consent.
  await page.waitForURL((url) => url.origin === oauth.issuer)
  await page.locator('input[name=login]').fill('ada@example.com')
  await page.locator('input[name=password]').fill('anything')
  await page.getByRole('button', { name: 'Sign-in' }).click()
  await page.getByRole('button', { name: 'Continue' }).click()
  await page.waitForURL(`${base}/console/connections/callback`)
  await page.getByText('tickets is connected').waitFor()
  // The code and state were taken off the address at once.
  expect(page.url()).toBe(`${base}/console/connections/callback`)
  await scan('connection-callback')
  await page.getByRole('link', { name: 'Back to your connections' }).click()
  const row = page.getByRole('row', { name: /tickets/ })
  await row.getByText('ready').waitFor()
  await row.getByText('connector tickets').waitFor()
  const listed = await t.app.handle(new Request(`${base}/o/acme/connections`, { headers: { authorization: `Bearer ${t.admin.token}` } }))
  const stored = (await listed.json()) as { data: { id: string; status: string }[] }
  expect(stored.data.map((c) => c.status)).toEqual(['ready'])
  expect(oauth.grantTypes).toEqual(['authorization_code'])
  for (const body of bodies) expect(body).not.toMatch(/eyJ[\w-]+\.[\w-]+\.[\w-]+/) // no JWT reached the page
})
