import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRemoteJWKSet, jwtVerify } from 'jose'
import Provider from 'oidc-provider'
import { startMcpServer, type TestMcpServer } from './mcp-server'

export interface OauthServer {
  issuer: string
  /** Every request it got, as `METHOD /path`. */
  requests: string[]
  /** The grant type of each token it gave (`authorization_code`, `refresh_token`), in order. */
  grantTypes: string[]
  /**
   * Follows `authorizationUrl` as a user signing in as `login` in a browser would (the provider's
   * own sign-in and consent pages, its cookies kept): where the provider sends the browser back.
   */
  signIn(authorizationUrl: string, login: string): Promise<URL>
  /** Whether `token` is an access token it issued for `resource`, unexpired: its subject, or null. */
  verify(token: string, resource: string): Promise<string | null>
  /** Ends every grant it gave: their refresh tokens no longer work. */
  revokeAll(): Promise<void>
  /** While true, its token endpoint answers 503 (a server down for a while), refusing nothing for good. */
  unavailable: boolean
  stop(): Promise<void>
}

/**
 * A real OAuth 2.1 authorization server on a free port: panva's `oidc-provider` with dynamic
 * client registration, PKCE, refresh tokens (rotated) and resource indicators, giving JWT access
 * tokens for the tool server `resource` (valid `accessTokenTtl` seconds). Its development sign-in
 * and consent pages take any login.
 */
export async function startOauthServer(options: { accessTokenTtl: number }): Promise<OauthServer> {
  const server = createServer()
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done))
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const requests: string[] = []
  const grants = new Set<string>()
  const grantTypes: string[] = []
  const provider = new Provider(issuer, {
    features: {
      devInteractions: { enabled: true },
      registration: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: (_ctx, _client, oneOf) => (Array.isArray(oneOf) ? oneOf[0] : oneOf) ?? '',
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => ({
          scope: 'tickets',
          audience: resource,
          accessTokenFormat: 'jwt',
          accessTokenTTL: options.accessTokenTtl,
        }),
      },
    },
    scopes: ['openid', 'offline_access', 'tickets'],
    issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
    pkce: { required: () => true },
    cookies: { keys: ['agentd-test-oauth-cookie-key'] },
    findAccount: async (_ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  })
  provider.on('grant.saved', (grant: { jti: string }) => grants.add(grant.jti))
  provider.on('grant.success', (ctx: { oidc: { params?: { grant_type?: unknown } } }) =>
    grantTypes.push(String(ctx.oidc.params?.grant_type)),
  )
  const callback = provider.callback()
  const control = { unavailable: false }
  server.on('request', (req, res) => {
    const path = new URL(req.url ?? '/', issuer).pathname
    requests.push(`${req.method} ${path}`)
    if (control.unavailable && path === '/token') {
      res.writeHead(503, { 'content-type': 'application/json' })
      return res.end(JSON.stringify({ error: 'temporarily_unavailable', error_description: 'down for maintenance' }))
    }
    callback(req, res)
  })
  const jwks = createRemoteJWKSet(new URL(`${issuer}/jwks`))
  return {
    get unavailable() {
      return control.unavailable
    },
    set unavailable(value: boolean) {
      control.unavailable = value
    },
    issuer,
    requests,
    grantTypes,
    async signIn(authorizationUrl, login) {
      const cookies = new Map<string, string>()
      const send = async (url: string, init: RequestInit = {}) => {
        const headers = new Headers(init.headers)
        headers.set('cookie', [...cookies].map(([k, v]) => `${k}=${v}`).join('; '))
        const res = await fetch(url, { ...init, headers, redirect: 'manual' })
        for (const line of res.headers.getSetCookie()) {
          const [pair] = line.split(';')
          const at = pair!.indexOf('=')
          cookies.set(pair!.slice(0, at), pair!.slice(at + 1))
        }
        return res
      }
      let res = await send(authorizationUrl)
      for (let hops = 0; hops < 20; hops++) {
        const location = res.headers.get('location')
        if (location) {
          const next = new URL(location, issuer)
          // Out of the provider: the browser goes back to the client.
          if (next.origin !== issuer) return next
          res = await send(next.href)
          continue
        }
        const page = await res.text()
        const action = /<form[^>]*action="([^"]+)"/.exec(page)?.[1]
        if (!action) throw new Error(`the provider answered ${res.status} without a form or a redirect: ${page.slice(0, 300)}`)
        const prompt = /name="prompt" value="(\w+)"/.exec(page)?.[1] ?? 'login'
        const form = new URLSearchParams({ prompt, login, password: 'any' })
        res = await send(new URL(action, issuer).href, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
          body: form,
        })
      }
      throw new Error('the sign-in did not end in a redirect to the client')
    },
    async verify(token, resource) {
      try {
        const { payload } = await jwtVerify(token, jwks, { issuer, audience: resource })
        return payload.sub ?? null
      } catch {
        return null
      }
    },
    async revokeAll() {
      for (const id of grants) await (await provider.Grant.find(id))?.destroy()
    },
    stop: () => new Promise<void>((done) => server.close(() => done())),
  }
}

/** A tool server behind `oauth` (it takes only that server's tokens for itself): test/helpers/mcp-server.ts. */
export function startProtectedMcp(oauth: OauthServer): TestMcpServer {
  return startMcpServer({ issuer: oauth.issuer, verify: (token, resource) => oauth.verify(token, resource) })
}

/** A catalog `mcp_servers` entry (spec 2.11) for a built-in connector at `url`, signed in with OAuth. */
export function connectorEntry(slug: string, title: string, url: string): Record<string, unknown> {
  return {
    name: slug,
    slug,
    title,
    description: `The team’s ${title.toLowerCase()}`,
    category: 'project-management',
    tags: [],
    verified: true,
    official: true,
    author: 'agentd tests',
    remotes: [{ type: 'streamable-http', url }],
    documentationUrl: `https://example.com/${slug}`,
    oauth: true,
  }
}
