import { afterAll, expect, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { KeySealer } from '../../src/accounts/seal'
import { ConnectorSignIn } from '../../src/connections/oauth'
import { openDb } from '../../src/db/client'
import { connections } from '../../src/db/schema'
import { publicFetch } from '../../src/egress/public-fetch'

/**
 * Attack: an authorization server whose metadata names an inside address for its token endpoint
 * (cloud metadata, a service on the host). Its metadata, found at sign-in, is kept with the
 * connection; a refresh then asks that endpoint. Under the outbound rules (no test switch here)
 * the request is refused before a byte is sent: a listener on the inside address hears nothing,
 * and the refusal, not being the server's own, leaves the connection as it was. The whole flow's
 * other requests use the same fetch (test/http/connectors.test.ts, test/egress/public-fetch.test.ts).
 */
let heard = 0
const inside = Bun.serve({
  hostname: '127.0.0.1',
  port: 0,
  fetch: () => {
    heard++
    return Response.json({ access_token: 'stolen', token_type: 'Bearer', expires_in: 3600 })
  },
})
const database = openDb(':memory:')
afterAll(() => {
  inside.stop(true)
  database.close()
})

test('a refresh whose token endpoint (from the server’s metadata) is an inside address is never sent', async () => {
  const sealer = new KeySealer(randomBytes(32))
  const logged: string[] = []
  // Names resolve as an attacker's DNS would answer: the server's own name publicly, its token endpoint's to the host.
  const resolve = async (host: string) => ({ 'auth.example.test': ['93.184.216.34'], 'token.example.test': ['127.0.0.1'] })[host] ?? []
  const signIn = new ConnectorSignIn({
    db: database.db,
    sealer,
    fetch: publicFetch({ resolve, allowPrivate: false }),
    redirectUrl: 'https://agentd.example.test/console/connections/callback',
    now: () => Date.now(),
    log: (line) => logged.push(line),
  })
  database.sqlite.run("INSERT INTO orgs (id, slug, created_at) VALUES ('org-1', 'acme', 1)")
  database.sqlite.run("INSERT INTO users (id, email, created_at) VALUES ('user-1', 'ada@example.test', 1)")
  const id = 'conn_inside'
  const record = {
    client: { client_id: 'agentd-client', redirect_uris: ['https://agentd.example.test/console/connections/callback'] },
    // Expired a minute ago: the next use refreshes.
    tokens: { access_token: 'old', token_type: 'Bearer', expires_in: 60, refresh_token: 'refresh-1' },
    tokensAt: Date.now() - 120_000,
    discovery: {
      authorizationServerUrl: 'https://auth.example.test',
      authorizationServerMetadata: {
        issuer: 'https://auth.example.test',
        authorization_endpoint: 'https://auth.example.test/authorize',
        token_endpoint: `https://token.example.test:${inside.port}/token`,
        response_types_supported: ['code'],
      },
    },
  }
  database.db
    .insert(connections)
    .values({
      id,
      orgId: 'org-1',
      userId: 'user-1',
      name: 'tickets',
      url: 'https://auth.example.test/mcp',
      status: 'ready',
      connector: 'tickets',
      sealedOauth: await sealer.sealBound({ use: 'connector_oauth', id }, JSON.stringify(record)),
      createdAt: 1,
    })
    .run()
  expect(await signIn.accessToken(id)).toBeNull() // expired, and no refresh could be made
  expect(heard).toBe(0)
  expect(logged.join('\n')).toContain('token.example.test resolves to a non-public address (127.0.0.1)')
  // A refusal of ours is no refusal of the server's: the owner is not asked to sign in again for it.
  expect(database.db.select({ status: connections.status }).from(connections).all()).toEqual([{ status: 'ready' }])
})
