/**
 * Forwarding to a real provider: the CLI's request goes out unchanged except for the credential
 * (the session's gateway key is swapped for the operator's provider key), and the reply streams
 * back unchanged while a copy is read for its token counts, so metering is the same as for the
 * scripted model.
 */
import type { Metered, ProviderConfig, UsageRecord, Upstream } from './protocol'

export type { Metered, Upstream } from './protocol'
import { parseJson } from './wire'

/** Request headers that must not travel upstream: hop-by-hop ones, sizes, and every credential. */
const DROP_REQUEST = new Set(['host', 'connection', 'content-length', 'accept-encoding', 'authorization', 'x-api-key', 'x-goog-api-key', 'transfer-encoding'])
/** Response headers that no longer describe the body once fetch has decoded it. */
const DROP_RESPONSE = new Set(['content-length', 'content-encoding', 'transfer-encoding', 'connection'])

export async function forward(
  req: Request,
  model: string,
  upstream: Upstream,
  provider: ProviderConfig,
  meter: (usage: Omit<UsageRecord, 'sessionId'>) => void,
): Promise<Response> {
  const headers = new Headers()
  req.headers.forEach((value, key) => {
    if (!DROP_REQUEST.has(key.toLowerCase())) headers.set(key, value)
  })
  for (const [key, value] of Object.entries(upstream.authHeaders(provider.apiKey))) headers.set(key, value)
  const target = upstream.target(new URL(req.url), provider.baseUrl.replace(/\/+$/, ''))
  let reply: Response
  try {
    reply = await fetch(target, { method: req.method, headers, body: await req.arrayBuffer(), signal: req.signal })
  } catch (err) {
    // 502 so the CLI reports a gateway problem rather than a model error it would retry forever.
    return Response.json({ error: { message: `agentd gateway: the provider could not be reached (${(err as Error).message})` } }, { status: 502 })
  }
  const outHeaders = new Headers()
  reply.headers.forEach((value, key) => {
    if (!DROP_RESPONSE.has(key.toLowerCase())) outHeaders.set(key, value)
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
