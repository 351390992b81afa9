import { ApiError, authFailed, notFound } from '../domain/errors'
import { API_KEY_PREFIX, type ApiKeyScope } from '../domain/api-keys'
import { USER_TOKEN_PREFIX } from '../domain/ids'
import type { IdentityService, OrgAccess, Principal } from './service'
import type { OidcVerifier } from './oidc'

/** Turns a bearer credential into a Principal, and a Principal plus org reference into access. */
export class AuthService {
  constructor(
    private readonly identity: IdentityService,
    private readonly oidc: OidcVerifier | null,
    private readonly apiKeys: { authenticate(secret: string): Principal | null } | null = null,
    /**
     * A replica of a region: waits until it has what the primary has now (or gives up), so a key or
     * token made on the primary a moment ago is found here too.
     */
    private readonly catchUp: (() => Promise<void>) | null = null,
  ) {}

  async authenticate(authorization: string | undefined): Promise<Principal> {
    // RFC 6750's token68 between HTTP's own blanks only: JavaScript's `\s` also takes U+00A0,
    // a byte a client can send, and a valid token with one appended was accepted.
    const match = /^Bearer[ \t]+([A-Za-z0-9\-._~+/]+=*)[ \t]*$/i.exec(authorization ?? '')
    if (!match) throw authFailed('A bearer token is required')
    const token = match[1]!
    const isKey = token.startsWith(API_KEY_PREFIX)
    const stored = () => (isKey ? (this.apiKeys?.authenticate(token) ?? null) : this.identity.userByToken(token))
    let found = stored()
    // A stored kind of credential unknown here, perhaps only not yet: a replica catches up once and
    // looks again. Identity-provider JWTs are never stored, so they never wait for it.
    if (!found && this.catchUp && (isKey || token.startsWith(USER_TOKEN_PREFIX))) {
      await this.catchUp()
      found = stored()
    }
    if (found) return found
    if (isKey) throw authFailed('The API key is unknown, revoked or expired')
    // Three dot-separated parts: an identity-provider JWT.
    if (this.oidc && token.split('.').length === 3) {
      const claims = await this.oidc.verify(token)
      if (claims) {
        const known = this.identity.userByEmail(claims.email)
        return {
          userId: known?.id ?? null,
          email: claims.email,
          name: claims.name ?? known?.name ?? null,
          avatarUrl: claims.picture ?? known?.avatarUrl ?? null,
          via: 'oidc',
        }
      }
    }
    throw authFailed('The bearer token is unknown, revoked or expired')
  }

  /** A caller with no role in the org gets 404, as if the org did not exist (spec section 5). */
  access(principal: Principal, org: string): OrgAccess {
    const access = this.identity.orgAccess(principal, org)
    // A key acts as its creator, but only in its own org.
    if (!access || (principal.apiKey && principal.apiKey.orgId !== access.orgId)) throw notFound('Org not found')
    return access
  }

  /**
   * Whether an API key may call a route: `scope` null means keys cannot call it at all (401, spec
   * section 5); otherwise the key needs that scope (403 INSUFFICIENT_SCOPE, contract section 5).
   */
  authorizeKey(principal: Principal, scope: ApiKeyScope | null): void {
    if (!principal.apiKey) return
    if (scope === null) throw authFailed('An API key cannot call this route; sign in instead')
    if (!principal.apiKey.scopes.includes(scope))
      throw new ApiError('forbidden', `This API key lacks the ${scope} scope`, 'INSUFFICIENT_SCOPE')
  }
}
