import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'
import { startIssuer, type LocalIssuer } from '../helpers/oidc'
import { ConfigError, loadConfig } from '../../src/config'

/**
 * Attacks on identity-provider sign-in: tokens the same provider minted for another application,
 * for an address it never verified, or that never expire must not open an org.
 */
let issuer: LocalIssuer
let t: TestApp
beforeAll(async () => {
  issuer = await startIssuer()
  t = await makeTestApp({ AGENTD_OIDC_ISSUER: issuer.url, AGENTD_OIDC_AUDIENCE: 'agentd' })
})
afterAll(async () => {
  await t[Symbol.asyncDispose]()
  issuer.stop()
})

// member@acme.test has a role in acme, so a token accepted for it lists the org's sessions.
const member = { email: 'member@acme.test', name: 'Mem Ber' }
const list = (token: string) => t.app.handle(req('GET', '/o/acme/p/_/sessions', { token }))

async function refused(token: string) {
  const res = await list(token)
  expect(res.status).toBe(401)
  expect(await json(res)).toMatchObject({ code: 'AUTH_FAILED' })
}

describe('OIDC tokens', () => {
  test('a token for agentd’s audience, with a verified email and an expiry, is accepted', async () => {
    const res = await list(await issuer.sign({ ...member, email_verified: true }))
    expect(res.status).toBe(200)
  })

  test('401 without an audience or for another application’s audience', async () => {
    await refused(await issuer.sign({ ...member, email_verified: true }, { audience: null }))
    await refused(await issuer.sign({ ...member, email_verified: true }, { audience: 'another-app' }))
  })

  test('401 unless email_verified is true: missing, false, or the string "true"', async () => {
    await refused(await issuer.sign(member))
    await refused(await issuer.sign({ ...member, email_verified: false }))
    await refused(await issuer.sign({ ...member, email_verified: 'true' }))
  })

  test('401 for an expired token and for one with no expiry', async () => {
    await refused(await issuer.sign({ ...member, email_verified: true }, { expiresIn: '-1m' }))
    await refused(await issuer.sign({ ...member, email_verified: true }, { expiresIn: null }))
  })

  test('401 for an unsigned token (alg none) with otherwise good claims', async () => {
    const part = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
    const now = Math.floor(Date.now() / 1000)
    const claims = { ...member, email_verified: true, iss: issuer.url, aud: 'agentd', iat: now, exp: now + 300 }
    await refused(`${part({ alg: 'none', typ: 'JWT' })}.${part(claims)}.`)
  })
})

describe('configuration', () => {
  test('an issuer without an audience is a config error, and `npm start` refuses to start', async () => {
    expect(() => loadConfig({ DATA_DIR: t.dir, AGENTD_OIDC_ISSUER: issuer.url })).toThrow(ConfigError)
    expect(() => loadConfig({ DATA_DIR: t.dir, AGENTD_OIDC_AUDIENCE: 'agentd' })).toThrow(ConfigError)
    const proc = Bun.spawn([process.execPath, 'src/main.ts'], {
      cwd: `${import.meta.dir}/../..`,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        DATA_DIR: `${t.dir}/never`,
        PORT: '0',
        AGENTD_SANDBOX: 'process',
        AGENTD_OIDC_ISSUER: issuer.url,
      },
      stdout: 'ignore',
      stderr: 'pipe',
    })
    const [code, stderr] = await Promise.all([proc.exited, new Response(proc.stderr).text()])
    expect(code).toBe(2)
    expect(stderr).toContain('AGENTD_OIDC_AUDIENCE')
  })
})
