import { exportJWK, generateKeyPair, SignJWT } from 'jose'

export interface SignOptions {
  issuer?: string
  /** null: no `aud` claim at all. */
  audience?: string | null
  /** A jose time span such as `5m` or `-1m`; null: no `exp` claim at all. */
  expiresIn?: string | null
  /** Signs with another key than the one the issuer publishes. */
  key?: CryptoKey
}

export type LocalIssuer = Awaited<ReturnType<typeof startIssuer>>

/**
 * A local identity provider on a free port: OIDC discovery and a JWKS, and a signer for its
 * tokens. Claims are signed as given; `iss`, `aud` (default `agentd`) and `exp` (default 5 minutes)
 * come from the options.
 */
export async function startIssuer() {
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
  const sign = (claims: Record<string, unknown>, options: SignOptions = {}) => {
    const jwt = new SignJWT(claims)
      .setProtectedHeader({ alg: 'RS256', kid: 'k1' })
      .setIssuer(options.issuer ?? url)
      .setIssuedAt()
    const audience = options.audience === undefined ? 'agentd' : options.audience
    if (audience !== null) jwt.setAudience(audience)
    const expiresIn = options.expiresIn === undefined ? '5m' : options.expiresIn
    if (expiresIn !== null) jwt.setExpirationTime(expiresIn)
    return jwt.sign(options.key ?? privateKey)
  }
  return { url, sign, stop: () => server.stop(true) }
}
