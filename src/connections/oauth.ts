import { randomBytes } from 'node:crypto'
import { eq } from 'drizzle-orm'
import {
  auth,
  exchangeAuthorization,
  refreshAuthorization,
  type OAuthClientProvider,
  type OAuthDiscoveryState,
} from '@modelcontextprotocol/sdk/client/auth.js'
import { InvalidClientError, InvalidGrantError, UnauthorizedClientError } from '@modelcontextprotocol/sdk/server/auth/errors.js'
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from '@modelcontextprotocol/sdk/shared/auth.js'
import type { KeySealer } from '../accounts/seal'
import type { Db } from '../db/client'
import { connections } from '../db/schema'
import { badRequest, forbidden, notFound, unprocessable } from '../domain/errors'

type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>

/** What agentd keeps of a connector's OAuth, sealed as one value (connections.sealed_oauth). */
interface OauthRecord {
  client?: OAuthClientInformationMixed
  tokens?: OAuthTokens
  /** When `tokens` were given (ms): with their `expires_in`, when they expire. */
  tokensAt?: number
  /** The PKCE verifier of the sign-in under way. */
  verifier?: string
  discovery?: OAuthDiscoveryState
}

export interface ConnectorSignInDeps {
  db: Db
  sealer: KeySealer
  /** Requests to the tool server and its authorization server, under the outbound rules (public-fetch.ts). */
  fetch: FetchLike
  /** Where the authorization server sends the browser back: the console's callback page (SIGN_IN_CALLBACK_PATH). */
  redirectUrl: string
  now: () => number
  log: (line: string) => void
}

/** An access token this close to its expiry (or half its life, when that is less) is refreshed before it is used. */
const REFRESH_AHEAD_MS = 60_000

/** What an authorization server's refusal says, kept short: it is shown to callers and logged. */
const brief = (err: unknown) => String((err as Error)?.message ?? err).slice(0, 300)

/** A refresh the server refused for good (the grant or client is gone): only a new sign-in helps. */
const refusedForGood = (err: unknown) =>
  err instanceof InvalidGrantError || err instanceof InvalidClientError || err instanceof UnauthorizedClientError

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
   * The last operation on each connection's OAuth state (a token asked for, a sign-in begun or
   * finished): each waits for the one before, so no two refresh with the same refresh token
   * (rotated, it is spent once; a reuse ends the whole grant) and none writes over another's tokens.
   */
  private readonly queue = new Map<string, Promise<unknown>>()

  constructor(private readonly deps: ConnectorSignInDeps) {}

  /** Starts a sign-in for connection `id`: the address to send its owner to. The connection keeps its status until the callback. */
  begin(id: string): Promise<string> {
    return this.serial(id, async () => {
      const row = this.deps.db.select().from(connections).where(eq(connections.id, id)).get()
      if (!row) throw notFound('Connection not found')
      const record = await this.recordOr422(row)
      // A new sign-in, not a refresh of the tokens the connection has (kept until its callback), and
      // found afresh: the tool server may have moved to another authorization server.
      const kept = { tokens: record.tokens, tokensAt: record.tokensAt }
      record.tokens = undefined
      record.discovery = undefined
      const state = randomBytes(24).toString('base64url')
      let authorizationUrl: URL | null = null
      const result = await auth(
        this.provider(record, state, (url) => (authorizationUrl = url)),
        {
          serverUrl: row.url,
          fetchFn: this.deps.fetch,
        },
      ).catch((err: unknown) => {
        throw unprocessable(`the tool server's sign-in could not be started: ${brief(err)}`, 'CONNECTOR_SIGN_IN_FAILED')
      })
      if (result !== 'REDIRECT' || !authorizationUrl)
        throw unprocessable('the tool server did not ask for a sign-in', 'CONNECTOR_SIGN_IN_FAILED')
      Object.assign(record, kept)
      await this.save(id, record, { oauthState: state })
      return String(authorizationUrl)
    })
  }

  /**
   * The callback of a sign-in: the connection waiting under `state`, if `userId` owns it (in `orgId`), gets the
   * tokens `code` is exchanged for and is `ready`. A state is good once: a replayed callback finds
   * nothing. Another user's callback changes nothing (403).
   */
  async complete(state: string, code: string, userId: string | null, orgId: string): Promise<Row> {
    const found = this.deps.db.select().from(connections).where(eq(connections.oauthState, state)).get()
    if (!found) throw badRequest('no sign-in waits under this state (it was used, or never given)', 'OAUTH_STATE_UNKNOWN')
    if (found.userId !== userId || found.orgId !== orgId) throw forbidden('this sign-in was started by another user')
    return this.serial(found.id, async () => {
      // Spent before the exchange: a replay of this callback finds nothing, whatever the exchange does.
      const spent = this.deps.db.update(connections).set({ oauthState: null }).where(eq(connections.oauthState, state)).returning().all()[0]
      if (!spent) throw badRequest('no sign-in waits under this state (it was used, or never given)', 'OAUTH_STATE_UNKNOWN')
      const record = await this.recordOr422(spent)
      const { discovery, client, verifier } = record
      if (!discovery || !client || !verifier) throw unprocessable('this sign-in was not started here', 'CONNECTOR_SIGN_IN_FAILED')
      // The exchange itself, once: the SDK's auth() would send a refused code a second time.
      const tokens = await exchangeAuthorization(discovery.authorizationServerUrl, {
        metadata: discovery.authorizationServerMetadata,
        clientInformation: client,
        authorizationCode: code,
        codeVerifier: verifier,
        redirectUri: this.deps.redirectUrl,
        ...(discovery.resourceMetadata?.resource ? { resource: discovery.resourceMetadata.resource } : {}),
        fetchFn: this.deps.fetch,
      }).catch((err: unknown) => {
        throw unprocessable(`the authorization server did not take the sign-in: ${brief(err)}`, 'CONNECTOR_SIGN_IN_FAILED')
      })
      Object.assign(record, { tokens, tokensAt: this.deps.now(), verifier: undefined })
      await this.save(spent.id, record, { status: 'ready' })
      const row = this.deps.db.select().from(connections).where(eq(connections.id, spent.id)).get()
      if (!row) throw notFound('Connection not found (it was removed during the sign-in)')
      return row
    })
  }

  /**
   * The access token to send for connection `id` now: refreshed first when it expires within a
   * minute. Null when the connection is not ready, or its refresh failed (it is then `reconnect`).
   */
  accessToken(id: string): Promise<string | null> {
    return this.serial(id, () => this.currentToken(id))
  }

  private async currentToken(id: string): Promise<string | null> {
    const row = this.deps.db.select().from(connections).where(eq(connections.id, id)).get()
    if (!row || row.status !== 'ready' || !row.sealedOauth) return null
    const record = await this.record(row).catch((err: unknown) => {
      this.deps.log(`agentd: connection ${id}'s sign-in cannot be read (${brief(err)}); it must be signed in again`)
      return null
    })
    if (!record) return this.markReconnect(id)
    const token = record.tokens?.access_token ?? null
    const expiresAt = tokenExpiry(record)
    const lifetime = (record.tokens?.expires_in ?? 0) * 1000
    if (token && (expiresAt === null || expiresAt - this.deps.now() > Math.min(REFRESH_AHEAD_MS, lifetime / 2))) return token
    return this.refresh(row, record, token !== null && expiresAt !== null && expiresAt > this.deps.now() ? token : null)
  }

  /** A refreshed access token; on a passing failure (the server unreachable) the current one while it lasts (`current`). */
  private async refresh(row: Row, record: OauthRecord, current: string | null): Promise<string | null> {
    const discovery = record.discovery
    const refreshToken = record.tokens?.refresh_token
    try {
      if (!discovery || !record.client || !refreshToken) throw new InvalidGrantError('the sign-in gave no refresh token')
      const tokens = await refreshAuthorization(discovery.authorizationServerUrl, {
        metadata: discovery.authorizationServerMetadata,
        clientInformation: record.client,
        refreshToken,
        ...(discovery.resourceMetadata?.resource ? { resource: discovery.resourceMetadata.resource } : {}),
        fetchFn: this.deps.fetch,
      })
      // A server that does not rotate refresh tokens keeps the one it gave.
      Object.assign(record, { tokens: { ...tokens, refresh_token: tokens.refresh_token ?? refreshToken }, tokensAt: this.deps.now() })
      await this.save(row.id, record, {})
      return tokens.access_token
    } catch (err) {
      if (!refusedForGood(err)) {
        this.deps.log(`agentd: connection ${row.id}'s token was not refreshed this time (${brief(err)})`)
        return current
      }
      this.deps.log(`agentd: connection ${row.id} must be signed in again: its token was not refreshed (${brief(err)})`)
      return this.markReconnect(row.id)
    }
  }

  private markReconnect(id: string): null {
    this.deps.db.update(connections).set({ status: 'reconnect' }).where(eq(connections.id, id)).run()
    return null
  }

  /** Runs `work` after every earlier operation on connection `id` settled. */
  private serial<T>(id: string, work: () => Promise<T>): Promise<T> {
    const result = (this.queue.get(id) ?? Promise.resolve()).then(work)
    const settled = result.catch(() => undefined)
    this.queue.set(id, settled)
    void settled.then(() => {
      if (this.queue.get(id) === settled) this.queue.delete(id)
    })
    return result
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
        record.tokensAt = this.deps.now()
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
    if (!row.sealedOauth) return {}
    return JSON.parse(await this.deps.sealer.openBound({ use: 'connector_oauth', id: row.id }, row.sealedOauth)) as OauthRecord
  }

  private recordOr422(row: Pick<Row, 'id' | 'sealedOauth'>): Promise<OauthRecord> {
    return this.record(row).catch((err: unknown) => {
      throw unprocessable(
        `this connection's stored sign-in cannot be read (${brief(err)}); remove it and connect again`,
        'CONNECTOR_SIGN_IN_FAILED',
      )
    })
  }

  private async save(id: string, record: OauthRecord, set: Partial<Pick<Row, 'status' | 'oauthState'>>): Promise<void> {
    this.deps.db
      .update(connections)
      .set({
        ...set,
        sealedOauth: await this.deps.sealer.sealBound({ use: 'connector_oauth', id }, JSON.stringify(record)),
        tokenExpiresAt: tokenExpiry(record),
      })
      .where(eq(connections.id, id))
      .run()
  }
}

/** When the record's access token expires (ms), or null when its server did not say. */
function tokenExpiry(record: OauthRecord): number | null {
  const seconds = record.tokens?.expires_in
  return seconds === undefined || record.tokensAt === undefined ? null : record.tokensAt + seconds * 1000
}
