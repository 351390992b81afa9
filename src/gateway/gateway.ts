/**
 * agentd's model gateway: the only endpoint a sandboxed CLI may reach. Each wire protocol
 * (Anthropic Messages, OpenAI Responses, Gemini generateContent) is a sibling file exporting a
 * ProtocolHandler; this file owns listening, routing, authentication, the choice between the
 * scripted model and a configured provider, and metering.
 */
import { anthropicProtocol } from './anthropic'
import { geminiProtocol } from './gemini'
import { openaiProtocol } from './openai'
import type { GatewaySession, ProtocolHandler, Providers, UsageRecord } from './protocol'
import { forward } from './upstream'
import { parseJson, SCRIPTED_MODEL } from './wire'

export type { GatewaySession, ProtocolContext, ProtocolHandler, ProviderConfig, ProviderName, Providers, UsageRecord } from './protocol'

export interface GatewayOptions {
  /** Maps the API key the CLI sends to its session, or null for an unknown key. */
  resolve(token: string): GatewaySession | null | Promise<GatewaySession | null>
  /** Called once for every model reply, for metering. */
  onUsage?(usage: UsageRecord): void
  /**
   * A line for the session's log per model request: when it arrived, and what the gateway
   * answered how fast (a stream's status when it starts). Says where a turn that went quiet stopped.
   */
  onLog?(session: GatewaySession, line: string): void
  /** Requests for a model other than `scripted` go to the protocol's provider when it is set here. */
  providers?: Providers
  /**
   * `/mcp/<name>…`: a request of the session's CLI to its tool server `name` (shape B
   * connections), passed on by the egress proxy with the server's own credential; null when the
   * session has no server of that name.
   */
  mcp?(session: GatewaySession, name: string, req: Request): Promise<Response | null>
  /**
   * `/git/<owner>/<name>.git/<rest>`: git's smart HTTP from the sandbox to the session's
   * repository, sent on to the code host with its own credential (src/repositories/git-proxy.ts).
   */
  git?(session: GatewaySession, target: { owner: string; name: string; rest: string }, req: Request): Promise<Response>
  /**
   * `GET /_agentd/first-message`: what a CLI started ahead of its session (src/runtime/started-cli.ts)
   * waits for, by the key it was started with: its first turn's message once a session takes it,
   * '' when none did within a minute (asked again), null for a key nothing waits under. `signal`:
   * the request went away.
   */
  firstMessage?(key: string, signal: AbortSignal): Promise<string | null> | null
  /** Default 127.0.0.1: sandboxes reach the gateway through loopback or a forwarded socket. */
  hostname?: string
  /** Default 0: any free port. */
  port?: number
}

export interface Gateway {
  url: string
  port: number
  stop(): Promise<void>
  /**
   * Readies a session's turn for a freeze (a graceful restart): from now on its new model
   * requests are answered 503 with `Retry-After` (every CLI retries those), and this resolves once
   * none of its requests is being answered (a streamed reply counts to its last byte) with how
   * long that took in ms (0: none was), or with null at `deadline` (ms since the epoch), some still open.
   */
  quiesce(sessionId: string, deadline: number): Promise<number | null>
}

/** The requests being answered per session, and the sessions whose new requests wait for a restart. */
class InFlight {
  private readonly open = new Map<string, number>()
  readonly quiescing = new Set<string>()

  /** The session's requests being answered now. */
  count(sessionId: string): number {
    return this.open.get(sessionId) ?? 0
  }

  enter(sessionId: string): () => void {
    this.open.set(sessionId, (this.open.get(sessionId) ?? 0) + 1)
    let left = false
    return () => {
      if (left) return
      left = true
      const n = (this.open.get(sessionId) ?? 1) - 1
      if (n > 0) this.open.set(sessionId, n)
      else this.open.delete(sessionId)
    }
  }

  async quiesce(sessionId: string, deadline: number): Promise<number | null> {
    this.quiescing.add(sessionId)
    const started = performance.now()
    while (this.open.has(sessionId)) {
      if (Date.now() >= deadline) return null
      await Bun.sleep(20)
    }
    const waited = Math.round(performance.now() - started)
    // The reply's last bytes are written; the relay (this process too) passes them on in a loop turn or two.
    await Bun.sleep(50)
    return waited
  }
}

const PROTOCOLS: readonly ProtocolHandler[] = [anthropicProtocol, openaiProtocol, geminiProtocol]

/**
 * Model requests one session may have in flight (contract section 11): past it a new one is refused
 * at once with the protocol's 429, which every CLI retries after Retry-After. A request counts from
 * the moment its headers are read (a body still trickling in counts) to its reply's last byte.
 */
export const MAX_MODEL_REQUESTS_IN_FLIGHT = 8

/**
 * The largest request a sandbox may send the gateway. A CLI's request carries its whole
 * conversation, so this is far above the API's limits, yet far below Bun's 128 MiB default that a
 * hostile sandbox could otherwise make the server buffer per connection.
 */
export const GATEWAY_MAX_BODY_BYTES = 32 * 1024 * 1024

export function startGateway(opts: GatewayOptions): Gateway {
  const inFlight = new InFlight()
  const server = Bun.serve({
    hostname: opts.hostname ?? '127.0.0.1',
    port: opts.port ?? 0,
    // A scripted `sleep` or a slow upstream may keep a request quiet for long; the turn's own
    // timeout governs, not the socket's.
    idleTimeout: 0,
    maxRequestBodySize: GATEWAY_MAX_BODY_BYTES,
    fetch: (req) => route(req, opts, inFlight),
  })
  const port = server.port ?? 0
  return {
    url: `http://${server.hostname}:${port}`,
    port,
    stop: () => server.stop(true),
    quiesce: (sessionId, deadline) => inFlight.quiesce(sessionId, deadline),
  }
}

async function route(req: Request, opts: GatewayOptions, inFlight: InFlight): Promise<Response> {
  const { pathname } = new URL(req.url)
  // Claude Code probes connectivity with `HEAD /` before its first request.
  if (req.method === 'HEAD' && pathname === '/') return new Response(null, { status: 200 })

  if (pathname === FIRST_MESSAGE_PATH && req.method === 'GET') return firstMessage(req, opts)
  const server = MCP_PATH.exec(pathname)
  // Names are slugs: no escape is ever needed, so none is decoded (a malformed one cannot throw).
  if (server) return toolServer(req, server[1]!, opts)
  const repo = GIT_PATH.exec(pathname)
  if (repo) return gitRequest(req, { owner: repo[1]!, name: repo[2]!, rest: repo[3]! }, opts)
  const protocol = PROTOCOLS.find((p) => p.matches(req.method, pathname))
  if (!protocol) return notFound(req.method, pathname)

  const token = protocol.credential(req)
  const session = token ? await opts.resolve(token) : null
  if (!session) return protocol.unauthorized()

  // Logged before the body is read: a request whose body never completes still shows up.
  const started = performance.now()
  const line = (text: string) => opts.onLog?.(session, `${new Date().toISOString()} gateway: ${req.method} ${pathname}${text}\n`)
  line('')
  if (inFlight.quiescing.has(session.sessionId)) {
    const wait = protocol.refuse(503, 'agentd is restarting; retry in a moment')
    wait.headers.set('retry-after', '2')
    line(' answered 503 (agentd is restarting)')
    return wait
  }
  if (inFlight.count(session.sessionId) >= MAX_MODEL_REQUESTS_IN_FLIGHT) {
    const busy = protocol.refuse(
      429,
      `agentd gateway: this session already has ${MAX_MODEL_REQUESTS_IN_FLIGHT} model requests in flight; retry when one has ended`,
    )
    busy.headers.set('retry-after', '2')
    line(` answered 429 (${MAX_MODEL_REQUESTS_IN_FLIGHT} model requests in flight)`)
    return busy
  }
  // Counted in the same turn of the event loop as the check above: no request slips in between.
  const leave = inFlight.enter(session.sessionId)
  let answer: Response
  try {
    answer = await answerFor(req, protocol, session, opts)
  } catch (err) {
    leave()
    throw err
  }
  line(` answered ${answer.status} in ${Math.round(performance.now() - started)} ms`)
  return untilLastByte(answer, leave)
}

/** Where a CLI started ahead of its session asks for its first message. */
export const FIRST_MESSAGE_PATH = '/_agentd/first-message'

/** The first message of the session that took a started CLI: held until then, 404 for any other key. */
async function firstMessage(req: Request, opts: GatewayOptions): Promise<Response> {
  const key = /^Bearer (\S+)$/.exec(req.headers.get('authorization') ?? '')?.[1]
  const text = key ? await opts.firstMessage?.(key, req.signal) : null
  if (text === null || text === undefined) return new Response('no started CLI waits under this key\n', { status: 404 })
  if (text === '') return new Response(null, { status: 204 })
  // The CLI's own input: a stream-json line for Claude Code, the prompt's text for Gemini CLI.
  return new Response(text, { headers: { 'content-type': 'text/plain; charset=utf-8' } })
}

/** `answer`, with `done` called once its body was read to its end or given up (at once without a body). */
function untilLastByte(answer: Response, done: () => void): Response {
  if (!answer.body) {
    done()
    return answer
  }
  const reader = answer.body.getReader()
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await reader.read()
        if (next.done) {
          done()
          controller.close()
        } else controller.enqueue(next.value)
      } catch (err) {
        done()
        controller.error(err)
      }
    },
    cancel(reason) {
      done()
      return reader.cancel(reason)
    },
  })
  return new Response(body, { status: answer.status, statusText: answer.statusText, headers: answer.headers })
}

async function answerFor(req: Request, protocol: ProtocolHandler, session: GatewaySession, opts: GatewayOptions): Promise<Response> {
  // Checked before anything is answered or forwarded: the operator's provider key serves only
  // the models the session's harness lists in the catalog, and only within the plan.
  // A clone: the scripted model reads the request itself.
  const body = parseJson(await req.clone().text())
  const model = protocol.modelOf(new URL(req.url), body)
  if (model !== null && session.models && !session.models.has(model)) {
    return protocol.refuse(
      403,
      `model "${model}" is not available to this session (its harness may use: ${[...session.models].join(', ')})`,
    )
  }
  const refusal = session.refusal?.() ?? null
  if (refusal !== null) return protocol.refuse(402, refusal)

  const meter = (usage: Omit<UsageRecord, 'sessionId'>) =>
    opts.onUsage?.({ sessionId: session.sessionId, ...(session.turn !== undefined ? { turn: session.turn } : {}), ...usage })
  if (session.account === null)
    return protocol.refuse(
      403,
      "this session's provider account was removed (or its key can no longer be opened); it can make no further model call",
    )
  if (session.account) {
    // A run on the caller's own key: only its provider's protocol, only with its key.
    if (session.account.name !== protocol.provider)
      return protocol.refuse(403, `this session runs on a ${session.account.name} account; ${protocol.provider} is not reachable from it`)
    if (model !== null) return forward(req, body, model, protocol, session.account.config, meter)
  }
  const provider = opts.providers?.[protocol.provider]
  // The scripted model stays local even when a provider is configured: tests and demos use it.
  if (provider && model !== null && model !== SCRIPTED_MODEL) return forward(req, body, model, protocol, provider, meter)
  return protocol.handle(req, { session, meter })
}

/** `/mcp/<name>`: a tool server of the session, by the name (a slug) the CLI's config gives it. */
const MCP_PATH = /^\/mcp\/([a-z0-9][a-z0-9_-]{0,62})$/

/**
 * A CLI's request to one of its session's tool servers: the gateway key it sends as a bearer
 * token names the session (and only while its turn runs), the session's own servers are the only
 * ones reachable, and the proxy puts the server's credential on the request, so it never enters
 * the sandbox.
 */
async function toolServer(req: Request, name: string, opts: GatewayOptions): Promise<Response> {
  const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.get('authorization') ?? '')?.[1]
  const session = bearer ? await opts.resolve(bearer) : null
  if (!session) return Response.json({ error: 'unknown or expired gateway key' }, { status: 401 })
  const answer =
    (await opts.mcp?.(session, name, req)) ?? Response.json({ error: `this session has no tool server named ${name}` }, { status: 404 })
  opts.onLog?.(session, `${new Date().toISOString()} gateway: ${req.method} /mcp/${name} answered ${answer.status}\n`)
  return answer
}

/** `/git/<owner>/<name>.git/<rest>`: GitHub's owner and repository name characters only. */
const GIT_PATH = /^\/git\/([A-Za-z0-9][A-Za-z0-9-]{0,38})\/([A-Za-z0-9._-]{1,100}?)\.git\/([a-z/-]{1,40})$/

/** git in the sandbox sends the turn's gateway key as a bearer token (its home's git config adds it). */
async function gitRequest(req: Request, target: { owner: string; name: string; rest: string }, opts: GatewayOptions): Promise<Response> {
  const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.get('authorization') ?? '')?.[1]
  const session = bearer ? await opts.resolve(bearer) : null
  if (!session) return new Response('unknown or expired gateway key\n', { status: 401 })
  const answer = opts.git ? await opts.git(session, target, req) : new Response('Repository not found\n', { status: 404 })
  opts.onLog?.(
    session,
    `${new Date().toISOString()} gateway: ${req.method} /git/${target.owner}/${target.name}.git/${target.rest} answered ${answer.status}\n`,
  )
  return answer
}

function notFound(method: string, pathname: string): Response {
  return Response.json(
    { type: 'error', error: { type: 'not_found_error', message: `no route for ${method} ${pathname}` } },
    { status: 404 },
  )
}
