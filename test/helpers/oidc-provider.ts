import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import Provider from 'oidc-provider'

export interface OidcProvider {
  issuer: string
  /** Registers the one client, a public one (PKCE, no secret), once its redirect URI is known. */
  register(clientId: string, redirectUri: string): void
  stop(): Promise<void>
}

/**
 * A real OpenID provider on a free port: panva's `oidc-provider` (certified OpenID Connect),
 * with its development sign-in pages (any login, any password; the login is taken as the email,
 * verified). The issuer's address is known first, so the app under test can be configured with it;
 * the client comes once the app's own address (its redirect URI) is.
 */
export async function startOidcProvider(): Promise<OidcProvider> {
  const server = createServer()
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done))
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    issuer,
    register(clientId, redirectUri) {
      const provider = new Provider(issuer, {
        clients: [
          {
            client_id: clientId,
            token_endpoint_auth_method: 'none',
            redirect_uris: [redirectUri],
            grant_types: ['authorization_code'],
            response_types: ['code'],
          },
        ],
        findAccount: async (_ctx, id) => ({
          accountId: id,
          claims: async () => ({ sub: id, email: id, email_verified: true, name: id.split('@')[0] }),
        }),
        claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
        // The email claims in the ID token itself: agentd reads no userinfo.
        conformIdTokenClaims: false,
        pkce: { required: () => true },
        cookies: { keys: ['agentd-test-cookie-key'] },
        features: { devInteractions: { enabled: true } },
      })
      server.on('request', provider.callback())
    },
    stop: () => new Promise<void>((done) => server.close(() => done())),
  }
}
