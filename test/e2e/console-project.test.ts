import { afterAll, beforeAll, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Page } from 'playwright-core'
import { launchChromium } from '../helpers/chromium'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * A Project's settings page in the console, in headless Chromium: an admin adds a secret (its
 * value never in the page), is shown the API's refusals of a bad name and a bad allowlist entry by
 * the fields they name, saves the setup, its time limit and the allowlist, deletes the secret, and
 * sees the setup's lines of the Project's newest session (run on bubblewrap); a member is told
 * that only admins change it. Each page is scanned with axe-core and photographed (folder printed).
 */
const AXE = readFileSync(join(import.meta.dir, '../../node_modules/axe-core/axe.min.js'), 'utf8')
const VALUE = 'console-secret-9c41d7e2'
let t: TestApp
let base: string
let chromium: Awaited<ReturnType<typeof launchChromium>>
let artifacts: string
const external: string[] = []
beforeAll(async () => {
  t = await makeTestApp({ AGENTD_SANDBOX: 'bwrap' })
  base = t.listen()
  artifacts = mkdtempSync(join(tmpdir(), 'agentd-console-project-'))
  chromium = await launchChromium({ width: 1280, height: 1000 })
})
afterAll(async () => {
  await chromium?.close()
  await t?.[Symbol.asyncDispose]()
})

/** A tab signed in with `token`: confirmations accepted as a person would, every request checked to stay on agentd. */
async function signedIn(token: string): Promise<Page> {
  const page = await chromium.browser.newPage()
  page.setDefaultTimeout(90_000)
  page.on('dialog', (dialog) => void dialog.accept())
  page.on('request', (r) => {
    if (!r.url().startsWith(base) && !r.url().startsWith('data:')) external.push(r.url())
  })
  await page.goto(`${base}/console`)
  await page.getByLabel('Your token').fill(token)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { name: 'Sessions' }).waitFor()
  return page
}

/** axe-core on the page as it is: no serious or critical violation; and a screenshot of it. */
async function scan(page: Page, name: string): Promise<void> {
  await page.evaluate(AXE)
  const found = (await page.evaluate("axe.run(document, { resultTypes: ['violations'] })")) as {
    violations: { id: string; impact: string; nodes: { target: string[] }[] }[]
  }
  const serious = found.violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`)
  await page.screenshot({ path: join(artifacts, `${name}.png`), fullPage: true })
  expect({ page: name, serious }).toEqual({ page: name, serious: [] })
}

const asAdmin = async (method: string, path: string, body?: unknown) =>
  json(await t.app.handle(req(method, path, { token: t.admin.token, ...(body !== undefined ? { body } : {}) })))
const secretNames = async () => ((await asAdmin('GET', '/o/acme/projects/web/secrets')).data as { name: string }[]).map((s) => s.name)

test('an admin edits a Project: a secret added (its value never in the page), refusals shown by field, the environment saved whole, the secret deleted; the last setup’s lines', async () => {
  const page = await signedIn(t.admin.token)
  await page.getByRole('link', { name: 'Projects' }).click()
  await page.getByRole('heading', { name: 'Projects' }).waitFor()
  await scan(page, 'projects')
  await page.getByRole('link', { name: 'web settings' }).click()
  await page.waitForURL(`${base}/console/projects/web`)
  await page.getByRole('heading', { name: 'Project web' }).waitFor()
  await page.getByText('No secrets yet.').waitFor()
  await page.getByText('Revision 0: never saved').waitFor()
  await page.getByText('No setup has run yet').waitFor()
  expect(await page.getByLabel('Setup time limit (seconds)').inputValue()).toBe('900')

  // A secret: listed by name once saved, its value gone from the field and never in the page.
  await page.getByLabel('Name').fill('API_TOKEN')
  await page.getByLabel('Value').fill(VALUE)
  await page.getByRole('button', { name: 'Save secret' }).click()
  await page.getByRole('row', { name: /API_TOKEN/ }).waitFor()
  await page.getByText('Added API_TOKEN').waitFor()
  expect(await secretNames()).toEqual(['API_TOKEN'])
  expect(await page.getByLabel('Value').inputValue()).toBe('')
  expect(await page.content()).not.toContain(VALUE)

  // The API's refusal of a reserved name, said by the form and marked on the field it names.
  await page.getByLabel('Name').fill('PATH')
  await page.getByLabel('Value').fill('anything')
  await page.getByRole('button', { name: 'Save secret' }).click()
  await page.getByRole('alert').filter({ hasText: 'PATH is a variable agentd sets itself' }).waitFor()
  expect(await page.getByLabel('Name').getAttribute('aria-invalid')).toBe('true')
  expect(await secretNames()).toEqual(['API_TOKEN'])

  // The environment: a bad allowlist entry is refused by its line, nothing saved.
  await page.getByLabel('Setup script').fill('echo hello from setup')
  await page.getByLabel('Setup time limit (seconds)').fill('120')
  await page.getByLabel('Network allowlist').fill('registries\n\nnot a host!')
  await page.getByRole('button', { name: 'Save environment' }).click()
  await page.getByRole('alert').filter({ hasText: 'Allowlist, line 3: "not a host!" is not a host name' }).waitFor()
  expect(await page.getByLabel('Network allowlist').getAttribute('aria-invalid')).toBe('true')
  expect((await asAdmin('GET', '/o/acme/projects/web/environment')).revision).toBe(0)
  await scan(page, 'project-refusals')

  await page.getByLabel('Network allowlist').fill('registries\n*.example.com\n\napi.github.com:443\n')
  await page.getByRole('button', { name: 'Save environment' }).click()
  await page.getByText('Saved: revision 1.').waitFor()
  await page.getByText(/^Revision 1, saved /).waitFor()
  expect(await asAdmin('GET', '/o/acme/projects/web/environment')).toMatchObject({
    setup: 'echo hello from setup',
    setup_timeout_s: 120,
    network: { allow: ['registries', '*.example.com', 'api.github.com:443'] },
    revision: 1,
  })
  // The allowlist emptied (no network for the session below): saved whole, the setup kept.
  await page.getByLabel('Network allowlist').fill('')
  await page.getByRole('button', { name: 'Save environment' }).click()
  await page.getByText('Saved: revision 2.').waitFor()
  expect(await asAdmin('GET', '/o/acme/projects/web/environment')).toMatchObject({
    setup: 'echo hello from setup',
    setup_timeout_s: 120,
    network: { allow: [] },
    revision: 2,
  })

  // A session of the Project: the page finds its setup's lines and links to it.
  const started = await asAdmin('POST', '/o/acme/p/web/sessions', { agent: 'harness_1', prompt: script([{ answer: 'set up and done' }]) })
  const id = started.execution_id as string
  expect(id).toBeString()
  await page.getByRole('button', { name: 'Look again' }).click()
  await page.locator('.setup-log', { hasText: 'setup: hello from setup' }).waitFor({ timeout: 120_000 })
  await waitFor(
    async () => t.store.get(id)!.status,
    (status) => status === 'completed',
    120_000,
  )
  await page.locator('.setup-log', { hasText: 'agentd: setup done' }).waitFor()
  expect(await page.getByRole('link', { name: id }).getAttribute('href')).toBe(`/console/sessions/${id}`)
  expect(await page.content()).not.toContain(VALUE)
  await scan(page, 'project')

  // Deleted, once confirmed.
  await page.getByRole('button', { name: 'Delete API_TOKEN' }).click()
  await page.getByText('No secrets yet.').waitFor()
  expect(await secretNames()).toEqual([])

  // The session link opens that session's page.
  await page.getByRole('link', { name: id }).click()
  await page.waitForURL(`${base}/console/sessions/${id}`)
  await page.locator('.session-head .badge', { hasText: 'completed' }).waitFor()
  expect(external).toEqual([])
  console.log(`console project screenshots: ${artifacts}`)
}, 300_000)

test('a member sees the Project and its last setup, and is told plainly that only org admins change its environment', async () => {
  const page = await signedIn(t.member.token)
  await page.goto(`${base}/console/projects/web`)
  await page.getByRole('heading', { name: 'Project web' }).waitFor()
  await page.getByText("Only org admins can change a Project's environment").waitFor()
  expect(await page.getByLabel('Setup script').count()).toBe(0)
  expect(await page.getByRole('button', { name: 'Save secret' }).count()).toBe(0)
  await page.locator('.setup-log', { hasText: 'setup: hello from setup' }).waitFor()
  await scan(page, 'project-member')
}, 120_000)
