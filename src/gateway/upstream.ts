/**
 * Forwarding to a real provider: the CLI's request goes out as its protocol's allowlist has it
 * (allowlist.ts: the fields and headers the CLI needs, the operator's provider key instead of the
 * session's gateway key), and the reply streams back with the headers a CLI reads, while a copy is
 * read for its token counts, so metering is the same as for the scripted model.
 */
import { forwardedHeaders, forwardedQuery, Refused, REPLY_HEADERS } from './allowlist'
import type { Metered, ProtocolHandler, ProviderConfig, UsageRecord, Upstream } from './protocol'
import { parseJson } from './wire'
import { isObject } from '../domain/values'

export type { Metered, Upstream } from './protocol'

/**
 * Sends `req` (whose JSON body is `body`, already read) for `model` to `provider`; a request the
 * allowlist refuses never leaves (the protocol's 400 says why).
 */
export async function forward(
  req: Request,
  body: unknown,
  model: string,
  protocol: ProtocolHandler,
  provider: ProviderConfig,
  meter: (usage: Omit<UsageRecord, 'sessionId'>) => void,
): Promise<Response> {
  const upstream = protocol.upstream
  const url = new URL(req.url)
  let forwarded: Record<string, unknown>
  try {
    if (!isObject(body)) throw new Refused('agentd gateway: the request body must be a JSON object')
    forwarded = upstream.allowlist.body(body, url)
  } catch (err) {
    if (err instanceof Refused) return protocol.refuse(400, err.message)
    throw err
  }
  const headers = forwardedHeaders(req.headers, upstream.allowlist)
  headers.set('content-type', 'application/json')
  for (const [key, value] of Object.entries(upstream.authHeaders(provider.apiKey))) headers.set(key, value)
  const target = upstream.target(new URL(url.pathname + forwardedQuery(url, upstream.allowlist), url), provider.baseUrl.replace(/\/+$/, ''))
  let reply: Response
  try {
    reply = await fetch(target, { method: req.method, headers, body: JSON.stringify(forwarded), signal: req.signal })
  } catch (err) {
    // 502 so the CLI reports a gateway problem rather than a model error it would retry forever.
    return Response.json(
      { error: { message: `agentd gateway: the provider could not be reached (${(err as Error).message})` } },
      { status: 502 },
    )
  }
  // Only what a CLI reads: the rest speaks of the operator's account (organization, project, limits, request ids).
  const outHeaders = new Headers()
  reply.headers.forEach((value, key) => {
    if (REPLY_HEADERS.has(key)) outHeaders.set(key, value)
  })
  if (!reply.body) return new Response(null, { status: reply.status, headers: outHeaders })
  const [toClient, toMeter] = reply.body.tee()
  const streamed = (reply.headers.get('content-type') ?? '').includes('text/event-stream')
  void readUsage(toMeter, streamed, upstream).then((usage) => {
    if (usage) meter({ model, ...usage })
  })
  return new Response(toClient, { status: reply.status, headers: outHeaders })
}

async function readUsage(body: ReadableStream<Uint8Array>, streamed: boolean, upstream: Upstream): Promise<Metered | null> {
  const decoder = new TextDecoder()
  let usage: Metered | null = null
  let buffer = ''
  try {
    for await (const chunk of body) {
      buffer += decoder.decode(chunk, { stream: true })
      if (!streamed) continue
      const lines = buffer.split(/\r?\n/)
      buffer = lines.pop() ?? ''
      for (const line of lines) usage = dataLine(line, usage, upstream)
    }
  } catch {
    // The client went away and the copy was cancelled; count what arrived.
  }
  buffer += decoder.decode()
  if (!streamed) return upstream.usage(parseJson(buffer), null)
  return dataLine(buffer, usage, upstream)
}

function dataLine(line: string, usage: Metered | null, upstream: Upstream): Metered | null {
  if (!line.startsWith('data:')) return usage
  const payload = parseJson(line.slice(5).trim())
  return payload === undefined ? usage : upstream.usage(payload, usage)
}
