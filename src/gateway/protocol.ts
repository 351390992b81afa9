/**
 * The shapes the gateway and its wire protocols share: a session as the gateway knows it, a
 * metered reply, the operator's providers, and what each protocol file implements. Types only, so
 * the gateway and its protocol files depend on this and never on each other in a circle.
 */
import type { Allowlist } from './allowlist'

/** The session (and its turn in progress) a gateway token belongs to. */
export interface GatewaySession {
  sessionId: string
  /** The turn the token was minted for; usage metered after it is not that turn's. */
  turn?: number
  /** The session's workspace as the sandbox sees it; file tools get absolute paths under it. */
  workspace: string
  /**
   * The model ids this session may call; any other is 403 naming the model. agentd always sets
   * it; only the wire protocols' own tests, which have no catalog, leave it out.
   */
  models?: ReadonlySet<string>
  /** Why this turn may call the model no more (a plan limit it reached), or null; asked per call. */
  refusal?(): string | null
  /**
   * The caller's own provider account the session runs on: its calls go to that provider with the
   * account's key, never the operator's, and none is answered by another provider. Null once the
   * account was removed: every call is refused.
   */
  account?: { name: ProviderName; config: ProviderConfig } | null
}

export interface UsageRecord {
  sessionId: string
  turn?: number
  model: string
  input: number
  output: number
  cacheRead: number
  cacheWrite: number
}

/** The operator's real model providers (`AGENTD_CONFIG` key `providers`). */
export type ProviderName = 'anthropic' | 'openai' | 'google'

export interface ProviderConfig {
  /**
   * What the CLI would use as its base URL: `https://api.anthropic.com`, `https://api.openai.com/v1`,
   * `https://generativelanguage.googleapis.com`.
   */
  baseUrl: string
  apiKey: string
}

export type Providers = Partial<Record<ProviderName, ProviderConfig>>

/** What a protocol handler gets for one authenticated request. */
export interface ProtocolContext {
  session: GatewaySession
  meter(usage: Omit<UsageRecord, 'sessionId'>): void
}

export interface ProtocolHandler {
  /** The provider that speaks this protocol, for forwarding. */
  readonly provider: ProviderName
  /** Whether this protocol serves the route. */
  matches(method: string, pathname: string): boolean
  /** The API key as this protocol's clients send it. */
  credential(req: Request): string | null
  /** A 401 in this protocol's error shape, so the CLI reports it legibly. */
  unauthorized(): Response
  /**
   * Any other refusal in this protocol's error shape: 400 a request the allowlist will not forward,
   * 403 a model the session may not use, 402 a plan limit, 429 too many model requests in flight,
   * 503 a request to try again shortly (agentd is restarting).
   */
  refuse(status: 400 | 402 | 403 | 429 | 503, message: string): Response
  /** The model a request asks for (from its body or its path), or null when it names none. */
  modelOf(url: URL, body: unknown): string | null
  /** Answers with the scripted model. */
  handle(req: Request, ctx: ProtocolContext): Promise<Response>
  /** How a request travels to the real provider and how its reply is metered. */
  readonly upstream: Upstream
}

export type Metered = Omit<UsageRecord, 'sessionId' | 'model'>

export interface Upstream {
  /** What of a CLI's request is forwarded (allowlist.ts). */
  readonly allowlist: Allowlist
  /** The provider URL for a gateway URL, given the provider's base URL (no trailing slash). */
  target(url: URL, baseUrl: string): string
  /** Headers carrying the provider key. */
  authHeaders(apiKey: string): Record<string, string>
  /**
   * Folds one reply payload into the running counts: the whole JSON body of a plain reply, or
   * one `data:` payload of a streamed one. Returns the counts so far (null while none were seen).
   */
  usage(payload: unknown, sofar: Metered | null): Metered | null
}
