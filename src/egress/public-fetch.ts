import type { ResolveHost } from './address-policy'
import { publicExchange } from './public-get'

export interface PublicFetchRules {
  resolve: ResolveHost
  /** AGENTD_WEBHOOK_ALLOW_PRIVATE (tests only): http and inside addresses are allowed too. */
  allowPrivate: boolean
  /** PEM of a CA trusted besides the system's (AGENTD_FETCH_CA_FILE, tests only). */
  ca?: string | null
}

/** An answer's body past this is refused: what agentd asks this way (OAuth metadata, tokens) is small. */
const MAX_BODY_BYTES = 1024 * 1024
const TIMEOUT_MS = 10_000

/**
 * A `fetch` for requests agentd makes on a user's behalf to servers named by someone else (an
 * OAuth authorization server a tool server points at, and the endpoints its metadata names): the
 * outbound rules of publicExchange (https, every address public and checked as the connection is
 * made, no redirect followed), 1 MiB and 10 s at most. A refusal is a rejected promise whose
 * message says why.
 */
export function publicFetch(rules: PublicFetchRules) {
  return async (input: string | URL, init: RequestInit = {}): Promise<Response> => {
    const headers: Record<string, string> = {}
    new Headers(init.headers).forEach((value, name) => {
      headers[name] = value
    })
    let body: Buffer | null = null
    if (init.body !== undefined && init.body !== null) {
      // As fetch does: a form or JSON text brings its own media type unless one was given.
      const encoded = new Response(init.body)
      const type = encoded.headers.get('content-type') // before the body is read: Bun forgets it after
      body = Buffer.from(await encoded.arrayBuffer())
      if (type && headers['content-type'] === undefined) headers['content-type'] = type
    }
    const refuse = (status: number, host: string) => (status < 200 || status > 599 ? `${host} answered with status ${status}` : null)
    const method = init.method ?? 'GET'
    const answer = await publicExchange(
      String(input),
      { method, headers, body },
      { ...rules, maxBytes: MAX_BODY_BYTES, timeoutMs: TIMEOUT_MS, signal: init.signal ?? undefined, refuse },
    )
    const out = new Headers()
    for (const [name, value] of Object.entries(answer.headers))
      for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value]) out.append(name, v)
    const empty = answer.status === 204 || answer.status === 205 || method === 'HEAD'
    return new Response(empty ? null : answer.bytes, { status: answer.status, headers: out })
  }
}
