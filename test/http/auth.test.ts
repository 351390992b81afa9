import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { exportJWK, generateKeyPair, SignJWT } from 'jose'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'

/** A local identity provider: OIDC discovery and a JWKS, and a signer for its tokens. */
async function startIssuer() {
  const { publicKey, privateKey } = await generateKeyPair('RS256')
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'RS256', use: 'sig' }
  let url = ''
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    fetch(request): Response {
      const { pathname } = new URL(request.url)
      if (pathname === '/.well-known/openid-configuration') return Response.json({ issuer: url, jwks_uri: `${url}/jwks` })
      if (pathname === '/jwks') return Response.json({ keys: [jwk] })
      return new Response('not found', { status: 404 })
    },
  })
  url = `http://127.0.0.1:${server.port}`
  const sign = (claims: Record<string, unknown>, options: { issuer?: string; audience?: string; expiresIn?: string; key?: CryptoKey } = {}) =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
      .setIssuer(options.issuer ?? url)
      .setAudience(options.audience ?? 'agentd')
      .setIssuedAt()
      .setExpirationTime(options.expiresIn ?? '5m')
      .sign(options.key ?? privateKey)
  return { url, sign, stop: () => server.stop(true) }
}

let issuer: Awaited<ReturnType<typeof startIssuer>>
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
    expect(await json(res)).toEqual({ ok: true })
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
    const jwt = await issuer.sign({ email: 'member@acme.test', name: 'Mem Ber' })
    expect((await list(bearer(jwt))).status).toBe(200)
  })

  test('a valid JWT for someone with no role in the org is 404, not 401', async () => {
    const jwt = await issuer.sign({ email: 'nobody@elsewhere.test' })
    expect((await list(bearer(jwt))).status).toBe(404)
  })

  test('401 for a wrong audience, a wrong issuer, an expired token, a foreign key or no email', async () => {
    await expect401(await list(bearer(await issuer.sign({ email: 'member@acme.test' }, { audience: 'someone-else' }))))
    await expect401(await list(bearer(await issuer.sign({ email: 'member@acme.test' }, { issuer: 'https://evil.test' }))))
    await expect401(await list(bearer(await issuer.sign({ email: 'member@acme.test' }, { expiresIn: '-1m' }))))
    const { privateKey: foreign } = await generateKeyPair('RS256')
    await expect401(await list(bearer(await issuer.sign({ email: 'member@acme.test' }, { key: foreign }))))
    await expect401(await list(bearer(await issuer.sign({ sub: 'no-email' }))))
  })
})
