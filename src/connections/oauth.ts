import { randomBytes } from 'node:crypto'
import { eq } from 'drizzle-orm'
import { auth, refreshAuthorization, type OAuthClientProvider, type OAuthDiscoveryState } from '@modelcontextprotocol/sdk/client/auth.js'
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import type { KeySealer } from '../accounts/seal'
import type { Db } from '../db/client'
import { connections } from '../db/schema'
import { badRequest, forbidden, unprocessable } from '../domain/errors'

type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>

/** What agentd keeps of a connector's OAuth, sealed as one value (connections.sealed_oauth). */
interface OauthRecord {
  client?: OAuthClientInformationMixed
  tokens?: OAuthTokens
  /** The PKCE verifier of the sign-in under way. */
  verifier?: string
  discovery?: OAuthDiscoveryState
}

export interface ConnectorSignInDeps {
  db: Db
  sealer: KeySealer
  /** Requests to the tool server and its authorization server, under the outbound rules (public-fetch.ts). */
  fetch: FetchLike
  /** Where the authorization server sends the browser back: agentd's `GET /oauth/callback`. */
  redirectUrl: string
  now: () => number
  log: (line: string) => void
}

/** An access token this close to its expiry is refreshed before it is used. */
const REFRESH_AHEAD_MS = 60_000

type Row = typeof connections.$inferSelect

/**
 * Built-in connectors signed in with OAuth 2.1 (issue 37): the authorization-code flow with PKCE
 * against the authorization server the tool server names (MCP's authorization spec: its protected
 * resource metadata, then the server's metadata, dynamic client registration where offered), done
 * by the MCP SDK's own `auth()`. A connection is `connecting` until its owner's callback brings a
 * code the server exchanges; `ready` while its tokens work, refreshed ahead of expiry; `reconnect`
 * once a refresh fails, until its owner signs in again. Everything it keeps is sealed.
 */
export class ConnectorSignIn {
  /**
   * The last token asked for, by connection: each use waits for the one before, so no two refresh
   * with the same refresh token (rotated, it is spent once; a reuse ends the whole grant).
   */
  private readonly asking = new Map<string, Promise<string | null>>()

  constructor(private readonly deps: ConnectorSignInDeps) {}

  /** Starts a sign-in for `row`: the address to send its owner to. The connection keeps its status until the callback. */
  async begin(row: Pick<Row, 'id' | 'url' | 'sealedOauth'>): Promise<string> {
    const record = await this.record(row)
    // A new sign-in, not a refresh of the tokens the connection has (kept until its callback).
    const kept = record.tokens
    record.tokens = undefined
    const state = randomBytes(24).toString('base64url')
    let authorizationUrl: URL | null = null
    const result = await auth(
      this.provider(record, state, (url) => (authorizationUrl = url)),
      {
        serverUrl: row.url,
        fetchFn: this.deps.fetch,
      },
    ).catch((err: Error) => {
      throw unprocessable(`the tool server's sign-in could not be started: ${err.message}`, 'CONNECTOR_SIGN_IN_FAILED')
    })
    if (result !== 'REDIRECT' || !authorizationUrl)
      throw unprocessable('the tool server did not ask for a sign-in', 'CONNECTOR_SIGN_IN_FAILED')
    record.tokens = kept
    await this.save(row.id, record, { oauthState: state })
    return String(authorizationUrl)
  }

  /**
   * The callback of a sign-in: the connection waiting under `state`, if `userId` owns it (in `orgId`), gets the
   * tokens `code` is exchanged for and is `ready`. A state is good once: a replayed callback finds
   * nothing. Another user's callback changes nothing (403).
   */
  async complete(state: string, code: string, userId: string | null, orgId: string): Promise<Row> {
    const row = this.deps.db.select().from(connections).where(eq(connections.oauthState, state)).get()
    if (!row) throw badRequest('no sign-in waits under this state (it was used, or never given)', 'OAUTH_STATE_UNKNOWN')
    if (row.userId !== userId || row.orgId !== orgId) throw forbidden('this sign-in was started by another user')
    // Spent before the exchange: a replay of this callback finds nothing, whatever the exchange does.
    this.deps.db.update(connections).set({ oauthState: null }).where(eq(connections.id, row.id)).run()
    const record = await this.record(row)
    const result = await auth(
      this.provider(record, state, () => {}),
      {
        serverUrl: row.url,
        authorizationCode: code,
        fetchFn: this.deps.fetch,
      },
    ).catch((err: Error) => {
      throw unprocessable(`the authorization server did not take the sign-in: ${err.message}`, 'CONNECTOR_SIGN_IN_FAILED')
    })
    if (result !== 'AUTHORIZED' || !record.tokens) throw unprocessable('the sign-in gave no tokens', 'CONNECTOR_SIGN_IN_FAILED')
    record.verifier = undefined
    await this.save(row.id, record, { status: 'ready' })
    return this.deps.db.select().from(connections).where(eq(connections.id, row.id)).get()!
  }

  /**
   * The access token to send for connection `id` now: refreshed first when it expires within a
   * minute. Null when the connection is not ready, or its refresh failed (it is then `reconnect`).
   */
  accessToken(id: string): Promise<string | null> {
    const asked = (this.asking.get(id) ?? Promise.resolve(null)).then(() => this.currentToken(id))
    const settled = asked.catch(() => null)
    this.asking.set(id, settled)
    void settled.then(() => {
      if (this.asking.get(id) === settled) this.asking.delete(id)
    })
    return asked
  }

  private async currentToken(id: string): Promise<string | null> {
    const row = this.deps.db.select().from(connections).where(eq(connections.id, id)).get()
    if (!row || row.status !== 'ready' || !row.sealedOauth) return null
    const record = await this.record(row)
    const token = record.tokens?.access_token ?? null
    if (token && (row.tokenExpiresAt === null || row.tokenExpiresAt - this.deps.now() > REFRESH_AHEAD_MS)) return token
    return this.refresh(row, record)
  }

  private async refresh(row: Row, record: OauthRecord): Promise<string | null> {
    const discovery = record.discovery
    const refreshToken = record.tokens?.refresh_token
    try {
      if (!discovery || !record.client || !refreshToken) throw new Error('the sign-in gave no refresh token')
      const tokens = await refreshAuthorization(discovery.authorizationServerUrl, {
        metadata: discovery.authorizationServerMetadata,
        clientInformation: record.client,
        refreshToken,
        ...(discovery.resourceMetadata?.resource ? { resource: discovery.resourceMetadata.resource } : {}),
        fetchFn: this.deps.fetch,
      })
      // A server that does not rotate refresh tokens keeps the one it gave.
      record.tokens = { ...tokens, refresh_token: tokens.refresh_token ?? refreshToken }
      await this.save(row.id, record, {})
      return tokens.access_token
    } catch (err) {
      this.deps.log(`agentd: connection ${row.id} must be signed in again: its token was not refreshed (${(err as Error).message})`)
      this.deps.db.update(connections).set({ status: 'reconnect' }).where(eq(connections.id, row.id)).run()
      return null
    }
  }

  /** The SDK's view of one connection's OAuth state, kept in `record`; the authorization URL goes to `redirect`. */
  private provider(record: OauthRecord, state: string, redirect: (url: URL) => void): OAuthClientProvider {
    const metadata: OAuthClientMetadata = {
      client_name: 'agentd',
      redirect_uris: [this.deps.redirectUrl],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    }
    return {
      redirectUrl: this.deps.redirectUrl,
      clientMetadata: metadata,
      state: () => state,
      clientInformation: () => record.client,
      saveClientInformation: (client) => {
        record.client = client
      },
      tokens: () => record.tokens,
      saveTokens: (tokens) => {
        record.tokens = tokens
      },
      redirectToAuthorization: redirect,
      saveCodeVerifier: (verifier) => {
        record.verifier = verifier
      },
      codeVerifier: () => {
        if (!record.verifier) throw new Error('no sign-in is under way for this connection')
        return record.verifier
      },
      discoveryState: () => record.discovery,
      saveDiscoveryState: (discovery) => {
        record.discovery = discovery
      },
      invalidateCredentials: (scope) => {
        if (scope === 'all' || scope === 'client') record.client = undefined
        if (scope === 'all' || scope === 'tokens') record.tokens = undefined
        if (scope === 'all' || scope === 'verifier') record.verifier = undefined
        if (scope === 'all' || scope === 'discovery') record.discovery = undefined
      },
    }
  }

  private async record(row: Pick<Row, 'id' | 'sealedOauth'>): Promise<OauthRecord> {
    return row.sealedOauth ? (JSON.parse(await this.deps.sealer.open(`${row.id}/oauth`, row.sealedOauth)) as OauthRecord) : {}
  }

  private async save(id: string, record: OauthRecord, set: Partial<Pick<Row, 'status' | 'oauthState'>>): Promise<void> {
    const expiresIn = record.tokens?.expires_in
    this.deps.db
      .update(connections)
      .set({
        ...set,
        sealedOauth: await this.deps.sealer.seal(`${id}/oauth`, JSON.stringify(record)),
        tokenExpiresAt: expiresIn === undefined ? null : this.deps.now() + expiresIn * 1000,
      })
      .where(eq(connections.id, id))
      .run()
  }
}
