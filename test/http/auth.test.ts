import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { generateKeyPair } from 'jose'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'
import { startIssuer, type LocalIssuer } from '../helpers/oidc'

let issuer: LocalIssuer
let t: TestApp
beforeAll(async () => {
  issuer = await startIssuer()
  t = await makeTestApp({ AGENTD_OIDC_ISSUER: issuer.url, AGENTD_OIDC_AUDIENCE: 'agentd' })
  t.identity.createOrg('other')
  t.identity.createUser('other', 'stranger@other.test', 'admin')
})
afterAll(async () => {
  await t[Symbol.asyncDispose]()
  issuer.stop()
})

const list = (headers: Record<string, string>, org = 'acme') => t.app.handle(req('GET', `/o/${org}/p/_/sessions`, { headers }))
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

async function expect401(res: Response) {
  expect(res.status).toBe(401)
  expect(await json(res)).toMatchObject({ code: 'AUTH_FAILED' })
}

describe('bearer authentication', () => {
  test('/healthz needs none', async () => {
    const res = await t.app.handle(req('GET', '/healthz'))
    expect(res.status).toBe(200)
    expect(await json(res)).toEqual({ ok: true, ready: true, role: 'primary', node: expect.any(String), txid: 0 })
  })

  test('401 AUTH_FAILED without a bearer, with another scheme, or an unknown token', async () => {
    await expect401(await list({}))
    await expect401(await list({ authorization: `Basic ${btoa('a:b')}` }))
    await expect401(await list(bearer('agt_not-a-real-token')))
    await expect401(await t.app.handle(req('GET', '/o/acme/agents/available')))
  })

  test('a signed-in token works; a fresh one from `user token` works as well', async () => {
    expect((await list(bearer(t.admin.token))).status).toBe(200)
    const { token } = t.identity.tokenFor('admin@acme.test')
    expect((await list(bearer(token))).status).toBe(200)
  })

  test('a caller with no role in the org gets 404, by slug and by id', async () => {
    const stranger = t.identity.tokenFor('stranger@other.test').token
    expect((await list(bearer(stranger))).status).toBe(404)
    expect((await list(bearer(stranger), t.org.id)).status).toBe(404)
    expect((await list(bearer(t.admin.token), 'no-such-org')).status).toBe(404)
    expect((await list(bearer(t.admin.token), t.org.id)).status).toBe(200)
  })

  test('another org’s session is 404 even with its id', async () => {
    const created = await json(
      await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: 'hi' } })),
    )
    const stranger = t.identity.tokenFor('stranger@other.test').token
    expect((await t.app.handle(req('GET', `/o/other/p/_/sessions/${created.execution_id}`, { token: stranger }))).status).toBe(404)
    expect((await t.app.handle(req('GET', `/o/acme/p/_/sessions/${created.execution_id}`, { token: stranger }))).status).toBe(404)
  })
})

describe('identity-provider JWTs (AGENTD_OIDC_ISSUER)', () => {
  test('a valid JWT for a member’s email is accepted', async () => {
    const jwt = await issuer.sign({ email: 'member@acme.test', email_verified: true, name: 'Mem Ber' })
    expect((await list(bearer(jwt))).status).toBe(200)
  })

  test('a valid JWT for someone with no role in the org is 404, not 401', async () => {
    const jwt = await issuer.sign({ email: 'nobody@elsewhere.test', email_verified: true })
    expect((await list(bearer(jwt))).status).toBe(404)
  })

  test('401 for a wrong audience, a wrong issuer, an expired token, a foreign key or no email', async () => {
    await expect401(
      await list(bearer(await issuer.sign({ email: 'member@acme.test', email_verified: true }, { audience: 'someone-else' }))),
    )
    await expect401(
      await list(bearer(await issuer.sign({ email: 'member@acme.test', email_verified: true }, { issuer: 'https://evil.test' }))),
    )
    await expect401(await list(bearer(await issuer.sign({ email: 'member@acme.test', email_verified: true }, { expiresIn: '-1m' }))))
    const { privateKey: foreign } = await generateKeyPair('RS256')
    await expect401(await list(bearer(await issuer.sign({ email: 'member@acme.test', email_verified: true }, { key: foreign }))))
    await expect401(await list(bearer(await issuer.sign({ sub: 'no-email' }))))
  })
})
