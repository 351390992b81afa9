import { createRemoteJWKSet, jwtVerify, type JWTVerifyGetKey } from 'jose'

export interface OidcClaims {
  email: string
  name: string | null
  picture: string | null
}

/**
 * Verifies identity-provider JWTs against the issuer's JWKS, found through its discovery document.
 * The key set is fetched lazily and cached by jose (with its own refresh on unknown `kid`).
 */
export class OidcVerifier {
  private keys: Promise<JWTVerifyGetKey> | null = null

  constructor(
    private readonly issuer: string,
    private readonly audience: string | null,
  ) {}

  private jwks(): Promise<JWTVerifyGetKey> {
    this.keys ??= (async () => {
      const base = this.issuer.replace(/\/+$/, '')
      const res = await fetch(`${base}/.well-known/openid-configuration`)
      if (!res.ok) throw new Error(`OIDC discovery at ${base} answered ${res.status}`)
      const { jwks_uri } = (await res.json()) as { jwks_uri?: string }
      if (!jwks_uri) throw new Error(`OIDC discovery at ${base} has no jwks_uri`)
      return createRemoteJWKSet(new URL(jwks_uri))
    })().catch((err) => {
      this.keys = null // let the next request retry discovery
      throw err
    })
    return this.keys
  }

  /** The token's identity, or null when it is not a valid JWT from this issuer for this audience. */
  async verify(token: string): Promise<OidcClaims | null> {
    try {
      const { payload } = await jwtVerify(token, await this.jwks(), {
        issuer: this.issuer,
        ...(this.audience ? { audience: this.audience } : {}),
      })
      if (typeof payload.email !== 'string') return null
      return {
        email: payload.email,
        name: typeof payload.name === 'string' ? payload.name : null,
        picture: typeof payload.picture === 'string' ? payload.picture : null,
      }
    } catch {
      return null
    }
  }
}
