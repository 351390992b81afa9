import { authFailed, notFound } from '../domain/errors'
import type { IdentityService, OrgAccess, Principal } from './identity'
import type { OidcVerifier } from './oidc'

/** Turns a bearer credential into a Principal, and a Principal plus org reference into access. */
export class AuthService {
  constructor(
    private readonly identity: IdentityService,
    private readonly oidc: OidcVerifier | null,
  ) {}

  async authenticate(authorization: string | undefined): Promise<Principal> {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization ?? '')
    if (!match) throw authFailed('A bearer token is required')
    const token = match[1]!
    const user = this.identity.userByToken(token)
    if (user) return user
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
    if (!access) throw notFound('Org not found')
    return access
  }
}
