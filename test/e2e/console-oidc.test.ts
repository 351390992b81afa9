import { afterAll, beforeAll, expect, test } from 'bun:test'
import { launchChromium } from '../helpers/chromium'
import { makeTestApp, type TestApp } from '../helpers/app'
import { startOidcProvider, type OidcProvider } from '../helpers/oidc-provider'

/**
 * "Sign in with …" in the console: OpenID Connect's authorization-code flow with PKCE against a
 * real provider (oidc-provider), in headless Chromium. The ID token it hands back opens the API as
 * the user with that email; it lives in the tab's session storage, never in the address.
 */
let provider: OidcProvider
let t: TestApp
let base: string
let chromium: Awaited<ReturnType<typeof launchChromium>>
beforeAll(async () => {
  provider = await startOidcProvider()
  t = await makeTestApp({ AGENTD_OIDC_ISSUER: provider.issuer, AGENTD_OIDC_AUDIENCE: 'agentd-console' })
  base = t.listen()
  provider.register('agentd-console', `${base}/console/signed-in`)
  chromium = await launchChromium({ width: 1280, height: 900 })
})
afterAll(async () => {
  await chromium?.close()
  await t?.[Symbol.asyncDispose]()
  await provider?.stop()
})

test('Sign in with the provider: code and PKCE, the ID token kept in the tab, and the console open as that user', async () => {
  const page = await chromium.browser.newPage()
  page.setDefaultTimeout(90_000)
  const seen: string[] = []
  page.on('request', (r) => seen.push(r.url()))
  await page.goto(`${base}/console`)
  await page.getByRole('button', { name: `Sign in with ${new URL(provider.issuer).host}` }).click()
  // The provider's own pages: any login (the email), any password, then consent.
  await page.locator('input[name=login]').fill('admin@acme.test')
  await page.locator('input[name=password]').fill('anything')
  await page.getByRole('button', { name: 'Sign-in' }).click()
  await page.getByRole('button', { name: 'Continue' }).click()
  await page.getByRole('heading', { name: 'Sessions' }).waitFor()
  expect(await page.locator('.who .meta').textContent()).toBe('admin@acme.test')
  // The authorization request carried a S256 challenge; the code went back only in the token request.
  const authorize = new URL(seen.find((url) => url.startsWith(provider.issuer) && url.includes('code_challenge='))!)
  expect(authorize.searchParams.get('code_challenge_method')).toBe('S256')
  expect(authorize.searchParams.get('client_id')).toBe('agentd-console')
  // The token is an ID token, in session storage; the address has no code or token left.
  const kept = JSON.parse((await page.evaluate("sessionStorage.getItem('agentd.console.signed-in')")) as string) as { token: string }
  expect(kept.token.split('.')).toHaveLength(3)
  expect(page.url()).toBe(`${base}/console`)
  // It opens the API as that user, as any OIDC caller.
  const me = await fetch(`${base}/me`, { headers: { authorization: `Bearer ${kept.token}` } })
  expect(await me.json()).toMatchObject({ email: 'admin@acme.test', orgs: [{ slug: 'acme', role: 'admin' }] })
  // A callback that this tab did not start (a forged state) signs nobody in.
  const other = await chromium.browser.newPage()
  other.setDefaultTimeout(90_000)
  await other.goto(`${base}/console/signed-in?code=forged&state=forged`)
  await other.getByRole('alert').filter({ hasText: 'not started here' }).waitFor()
  expect(await other.evaluate("sessionStorage.getItem('agentd.console.signed-in')")).toBeNull()
}, 120_000)
