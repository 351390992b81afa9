import { createRemoteJWKSet, jwtVerify, type JWTVerifyGetKey } from 'jose'

export interface OidcClaims {
  email: string
  name: string | null
  picture: string | null
}

/**
 * Signatures an identity provider signs ID tokens with. Naming them keeps a symmetric or `none`
 * algorithm out even if a key set ever offered one.
 */
const ALGORITHMS = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'EdDSA']

/**
 * Verifies identity-provider JWTs against the issuer's JWKS, found through its discovery document.
 * The key set is fetched lazily and cached by jose (with its own refresh on unknown `kid`).
 *
 * A token is accepted only when it is for this audience (a token the same provider minted for
 * another application must not open agentd), carries an expiry, and vouches for its email: the
 * caller is matched to a user by email, so an unverified address would let anyone who can sign up
 * at the provider claim a member's identity.
 */
export class OidcVerifier {
  private keys: Promise<JWTVerifyGetKey> | null = null

  constructor(
    private readonly issuer: string,
    private readonly audience: string,
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

  /**
   * The token's identity, or null when it is not a valid JWT from this issuer for this audience,
   * has no expiry, or does not say its email is verified.
   */
  async verify(token: string): Promise<OidcClaims | null> {
    try {
      const { payload } = await jwtVerify(token, await this.jwks(), {
        issuer: this.issuer,
        audience: this.audience,
        algorithms: ALGORITHMS,
        requiredClaims: ['exp'],
      })
      if (typeof payload.email !== 'string' || payload.email_verified !== true) return null
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
