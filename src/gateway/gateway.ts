/**
 * agentd's model gateway: the only endpoint a sandboxed CLI may reach. Each wire protocol
 * (Anthropic Messages today; OpenAI Responses and Gemini later) is a sibling file exporting a
 * ProtocolHandler; this file owns listening, routing, authentication and metering.
 */
import { anthropicProtocol } from './anthropic'

/** The session a gateway token belongs to. */
export interface GatewaySession {
  sessionId: string
  /** The session's workspace as the sandbox sees it; file tools get absolute paths under it. */
  workspace: string
}

export interface UsageRecord {
  sessionId: string
  model: string
  input: number
  output: number
  cacheRead: number
  cacheWrite: number
}

export interface GatewayOptions {
  /** Maps the API key the CLI sends to its session, or null for an unknown key. */
  resolve(token: string): GatewaySession | null | Promise<GatewaySession | null>
  /** Called once for every model reply, for metering. */
  onUsage?(usage: UsageRecord): void
  /** Default 127.0.0.1: sandboxes reach the gateway through loopback or a forwarded socket. */
  hostname?: string
  /** Default 0: any free port. */
  port?: number
}

export interface Gateway {
  url: string
  port: number
  stop(): Promise<void>
}

/** What a protocol handler gets for one authenticated request. */
export interface ProtocolContext {
  session: GatewaySession
  meter(usage: Omit<UsageRecord, 'sessionId'>): void
}

export interface ProtocolHandler {
  /** Whether this protocol serves the route. */
  matches(method: string, pathname: string): boolean
  /** The API key as this protocol's clients send it. */
  credential(req: Request): string | null
  /** A 401 in this protocol's error shape, so the CLI reports it legibly. */
  unauthorized(): Response
  handle(req: Request, ctx: ProtocolContext): Promise<Response>
}

const PROTOCOLS: readonly ProtocolHandler[] = [anthropicProtocol]

export function startGateway(opts: GatewayOptions): Gateway {
  const server = Bun.serve({
    hostname: opts.hostname ?? '127.0.0.1',
    port: opts.port ?? 0,
    // A scripted `sleep` or a slow upstream may keep a request quiet for long; the turn's own
    // timeout governs, not the socket's.
    idleTimeout: 0,
    fetch: (req) => route(req, opts),
  })
  const port = server.port ?? 0
  return {
    url: `http://${server.hostname}:${port}`,
    port,
    stop: () => server.stop(true),
  }
}

async function route(req: Request, opts: GatewayOptions): Promise<Response> {
  const { pathname } = new URL(req.url)
  // Claude Code probes connectivity with `HEAD /` before its first request.
  if (req.method === 'HEAD' && pathname === '/') return new Response(null, { status: 200 })

  const protocol = PROTOCOLS.find((p) => p.matches(req.method, pathname))
  if (!protocol) return notFound(req.method, pathname)

  const token = protocol.credential(req)
  const session = token ? await opts.resolve(token) : null
  if (!session) return protocol.unauthorized()

  const meter = (usage: Omit<UsageRecord, 'sessionId'>) => opts.onUsage?.({ sessionId: session.sessionId, ...usage })
  return protocol.handle(req, { session, meter })
}

function notFound(method: string, pathname: string): Response {
  return Response.json(
    { type: 'error', error: { type: 'not_found_error', message: `no route for ${method} ${pathname}` } },
    { status: 404 },
  )
}
