import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Page } from 'playwright-core'
import { launchChromium } from '../helpers/chromium'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * The console in headless Chromium, as a person uses it: sign in, start a scripted session on
 * bubblewrap, watch its events arrive, send a follow-up while the turn runs (queued, then
 * delivered), pause and resume, cancel; create and revoke an API key. Every page is scanned with
 * axe-core (no serious or critical violation) and photographed into a temp folder (printed).
 */
const AXE = readFileSync(join(import.meta.dir, '../../node_modules/axe-core/axe.min.js'), 'utf8')
let t: TestApp
let base: string
let chromium: Awaited<ReturnType<typeof launchChromium>>
let page: Page
let artifacts: string
const external: string[] = []
/** Every request the page sent to the API, and what the browser said of the page's CSP. */
const asked: string[] = []
const refused: string[] = []
beforeAll(async () => {
  // Webhook URLs on this machine's loopback (tests only), for the key page's webhook.
  t = await makeTestApp({ AGENTD_SANDBOX: 'bwrap', AGENTD_WEBHOOK_ALLOW_PRIVATE: '1' })
  base = t.listen()
  artifacts = mkdtempSync(join(tmpdir(), 'agentd-console-'))
  chromium = await launchChromium({ width: 1280, height: 1000 })
  page = await chromium.browser.newPage()
  // Every wait is for something the system says; on a loaded machine that may take a while.
  page.setDefaultTimeout(90_000)
  // Confirmations (cancel, revoke) are accepted as a person would.
  page.on('dialog', (dialog) => void dialog.accept())
  page.on('request', (r) => {
    if (!r.url().startsWith(base) && !r.url().startsWith('blob:') && !r.url().startsWith('data:') && r.url() !== 'about:srcdoc')
      external.push(r.url())
    if (r.url().startsWith(`${base}/o/`)) asked.push(r.url().slice(base.length))
  })
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) refused.push(m.text())
  })
})
afterAll(async () => {
  await chromium?.close()
  await t?.[Symbol.asyncDispose]()
})

/** axe-core on the page as it is: no serious or critical violation; and a screenshot of it. */
async function scan(name: string): Promise<void> {
  await page.evaluate(AXE)
  // A string: it runs in the page, where `axe` is (the test's own types know no DOM).
  const found = (await page.evaluate("axe.run(document, { resultTypes: ['violations'] })")) as {
    violations: { id: string; impact: string; nodes: { target: string[] }[] }[]
  }
  const serious = found.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)
  await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true })
  expect({ page: name, serious }).toEqual({ page: name, serious: [] })
}

const badge = (status: string) => page.locator('.session-head .badge', { hasText: status.replace('_', ' ') })
const row = (id: string) => t.store.get(id)!

test('sign in, start a session and watch it live, a follow-up queued then delivered, pause, resume, cancel; a key created and revoked; every page passes axe', async () => {
  await page.goto(`${base}/console`)
  await scan('sign-in')
  await page.getByLabel('Your token').fill(t.admin.token)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sessions' }).waitFor()
  await page.getByText('No sessions yet').waitFor()
  await scan('sessions-empty')
  // The token is in the tab's session storage, not in the address.
  expect(page.url()).not.toContain(t.admin.token)
  expect(await page.evaluate(() => JSON.stringify(sessionStorage))).toContain(t.admin.token)

  await page.getByRole('link', { name: 'New session' }).click()
  await page.getByLabel('Harness').selectOption('harness_1')
  // The turn waits for a file the test puts in its workspace: it runs as long as the test needs.
  await page
    .getByLabel('Prompt')
    .fill(script([{ bash: 'echo started; while [ ! -e go ]; do sleep 0.1; done; echo released' }, { answer: 'first answer' }]))
  await page.getByLabel('Output schema (JSON Schema, optional)').fill('{ not json')
  await page.getByText('The output schema is not JSON').waitFor()
  await page.getByLabel('Output schema (JSON Schema, optional)').fill('')
  await scan('new-session')
  await page.getByRole('button', { name: 'Start' }).click()
  await page.waitForURL(/\/console\/sessions\/[0-9a-f-]{36}$/)
  const id = page.url().split('/').pop()!

  // Live: the turn's own events are on the page while it still runs.
  await page.locator('.events li', { hasText: 'tool_use' }).waitFor({ timeout: 90_000 })
  expect(row(id).status).toBe('running')
  // A follow-up sent while the turn runs is queued, then delivered as the next turn.
  await page.getByLabel('Follow-up').fill(script([{ answer: 'second answer' }]))
  await page.getByRole('button', { name: 'Send' }).click()
  await page.getByText('Queued: number 1 in line').waitFor()
  writeFileSync(join(t.dir, 'sandboxes', id, 'workspace', 'go'), '')
  await page.getByText('second answer', { exact: true }).waitFor({ timeout: 90_000 })
  expect(row(id).turnsCount).toBe(2)
  await badge('completed').waitFor()

  // Pause parks the sandbox, resume wakes it; cancel ends the session.
  await page.getByRole('button', { name: 'Pause' }).click()
  await badge('paused').waitFor({ timeout: 60_000 })
  expect(row(id).status).toBe('paused')
  await page.getByRole('button', { name: 'Resume' }).click()
  await badge('completed').waitFor({ timeout: 60_000 })
  await scan('session')
  // The state chart, with this session's path, is in its frame.
  expect(await page.frameLocator('iframe.chart').locator('#session[data-status]').getAttribute('data-status')).toBe('completed')
  // Fork makes a session from this one's parked sandbox and opens it; the fork links back to its source.
  await page.getByRole('button', { name: 'Fork' }).click()
  await page.waitForURL((url) => /\/console\/sessions\/[0-9a-f-]{36}$/.test(url.pathname) && !url.pathname.endsWith(id))
  const forkId = page.url().split('/').pop()!
  expect(row(forkId)).toMatchObject({ status: 'completed', forkedFromSession: id, forkedFromTurn: 2, turnsCount: 0 })
  await page.getByText('Forked from').waitFor()
  await scan('session-fork')
  await page.getByRole('link', { name: id.slice(0, 8) }).click()
  await page.waitForURL((url) => url.pathname.endsWith(id))
  await badge('completed').waitFor()
  // A finished turn cannot be cancelled (the button says so by being off); a running one can.
  expect(await page.getByRole('button', { name: 'Cancel session' }).isDisabled()).toBe(true)
  await page.getByLabel('Follow-up').fill(script([{ bash: 'while [ ! -e never ]; do sleep 0.1; done' }, { answer: 'never' }]))
  await page.getByRole('button', { name: 'Send' }).click()
  await badge('running').waitFor({ timeout: 60_000 })
  await page.getByRole('button', { name: 'Cancel session' }).click()
  await badge('cancelled').waitFor({ timeout: 60_000 })
  expect(row(id).status).toBe('cancelled')
  expect(await page.getByRole('button', { name: 'Send' }).isDisabled()).toBe(true)

  // The list shows it, by its status in words.
  await page.getByRole('link', { name: 'Sessions' }).click()
  await page.locator('.session-row', { hasText: 'cancelled' }).waitFor()
  await scan('sessions')
  // Opened afresh, the list's first page is asked once, by the page's head script (allowed by its
  // hash), and the typed client takes that answer rather than asking again.
  asked.length = 0
  await page.reload()
  await page.locator('.session-row', { hasText: 'cancelled' }).waitFor()
  expect(asked.filter((url) => url.startsWith('/o/acme/sessions'))).toEqual(['/o/acme/sessions?limit=50'])
  expect(refused).toEqual([])

  await page.getByRole('link', { name: 'API keys' }).click()
  await page.getByLabel('Name').fill('ci')
  await page.getByRole('button', { name: 'Create key' }).click()
  const secret = (await page.locator('.secret code').textContent())!
  expect(secret).toMatch(/^sk_live_/)
  const keys = async () =>
    (await json(await t.app.handle(req('GET', '/o/acme/api-keys', { token: t.admin.token })))).data as { name: string }[]
  expect((await keys()).map((k) => k.name)).toEqual(['ci'])
  // The key works: it reads the session the console started.
  expect((await t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token: secret }))).status).toBe(200)
  await scan('keys')
  await page.getByRole('button', { name: 'Revoke ci' }).click()
  await waitFor(keys, (list) => list.length === 0)
  await page.getByRole('row', { name: /ci/ }).waitFor({ state: 'detached' })
  expect((await t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token: secret }))).status).toBe(401)

  // Everything came from agentd itself.
  expect(external).toEqual([])
  console.log(`console screenshots: ${artifacts}`)
}, 300_000)

test('a session started with an attachment has it in its workspace; a key gets a webhook and its secret, lists its deliveries, and is rotated: the old secret stops, the new one works', async () => {
  await page.goto(`${base}/console/new`)
  await page.getByLabel('Harness').selectOption('harness_1')
  await page.getByLabel('Prompt').fill(script([{ bash: 'cat /workspace/.agentd/attachments/notes.txt' }, { answer: 'read it' }]))
  await page
    .getByLabel('Attachments')
    .setInputFiles({ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('words from the attachment') })
  await page.getByRole('button', { name: 'Start' }).click()
  await page.waitForURL(/\/console\/sessions\/[0-9a-f-]{36}$/)
  const id = page.url().split('/').pop()!
  await page.locator('.session-head .badge', { hasText: 'completed' }).waitFor()
  expect(String(t.store.allEvents(id).find((e) => e.type === 'tool_result')!.data.output)).toContain('words from the attachment')
  await page.getByRole('cell', { name: 'cat' }).waitFor()

  await page.getByRole('link', { name: 'API keys' }).click()
  await page.getByLabel('Name').fill('hooks')
  await page.getByRole('button', { name: 'Create key' }).click()
  const first = (await page.locator('.secret code').textContent())!
  await page.getByLabel('Webhook URL of hooks').fill('http://127.0.0.1:9/agentd-hook')
  await page.getByRole('button', { name: 'Save webhook' }).click()
  await page.locator('.secret code', { hasText: 'whsec_' }).waitFor()
  await page.getByRole('button', { name: 'Deliveries' }).click()
  await page.getByText('No deliveries yet.').waitFor()
  await page.getByRole('button', { name: 'Rotate hooks' }).click()
  const rotated = (await page.locator('.secret code', { hasText: 'sk_live_' }).textContent())!
  expect(rotated).not.toBe(first)
  const read = async (token: string) => (await t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token }))).status
  expect([await read(first), await read(rotated)]).toEqual([401, 200])
  await scan('keys-webhook')
}, 300_000)

/** Tab until the focused element matches `selector`, at most `most` presses: the focus order gets there. */
async function tabTo(selector: string, most = 40): Promise<void> {
  for (let i = 0; i < most; i++) {
    await page.keyboard.press('Tab')
    if (await page.evaluate(`document.activeElement?.matches(${JSON.stringify(selector)}) ?? false`)) return
  }
  throw new Error(`${most} presses of Tab never reached ${selector}`)
}

test('with the keyboard alone: skip to the content, search, open a session and send it a follow-up', async () => {
  await page.goto(`${base}/console`)
  await page.locator('.session-row').first().waitFor()
  // The first stop is the skip link; it lands on the page's content, past the navigation.
  await page.keyboard.press('Tab')
  expect(await page.evaluate('document.activeElement.textContent')).toBe('Skip to content')
  await page.keyboard.press('Enter')
  expect(await page.evaluate('document.activeElement.id')).toBe('main')
  // The search box comes next; Enter searches.
  await tabTo('input[name=q]', 3)
  await page.keyboard.type('attachments/notes.txt')
  await page.keyboard.press('Enter')
  await page.locator('.count', { hasText: /^1 session$/ }).waitFor()
  // Through the filters to the list's one row; Enter opens it.
  await tabTo('.session-row', 8)
  await page.keyboard.press('Enter')
  await page.waitForURL(/\/console\/sessions\/[0-9a-f-]{36}$/)
  const id = page.url().split('/').pop()!
  await page.locator('.session-head .badge', { hasText: 'completed' }).waitFor()
  // The follow-up box, then its Send button, in the order they read.
  await tabTo('#follow-up')
  await page.keyboard.type(script([{ answer: 'sent by keyboard' }]))
  await tabTo('button[type=submit]', 2)
  expect(await page.evaluate('document.activeElement.textContent')).toBe('Send')
  await page.keyboard.press('Enter')
  await page.getByText('sent by keyboard', { exact: true }).waitFor()
  expect(t.store.get(id)!.turnsCount).toBe(2)
}, 300_000)
