import http from 'node:http'
import https from 'node:https'
import tls from 'node:tls'
import { isIP } from 'node:net'
import { checkedLookup, hostOf, isPublicAddress, type ResolveHost } from './address-policy'

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
 * OAuth authorization server a tool server points at, and the endpoints its metadata names):
 * https only, every address public, checked as the connection is made (the webhook rules, spec
 * 4.5), no redirect followed (each hop would need the check), 1 MiB and 10 s at most. A refusal
 * is a rejected promise whose message says why.
 */
export function publicFetch(rules: PublicFetchRules) {
  return async (input: string | URL, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(String(input))
    const secure = url.protocol === 'https:'
    if (!secure && !(rules.allowPrivate && url.protocol === 'http:')) throw new Error(`${url.origin} is not an https URL`)
    const host = hostOf(url)
    if (isIP(host) && !isPublicAddress(host) && !rules.allowPrivate) throw new Error(`${host} is not a public address`)
    const headers: Record<string, string> = { 'user-agent': 'agentd' }
    new Headers(init.headers).forEach((value, name) => {
      headers[name] = value
    })
    let body: Buffer | null = null
    if (init.body !== undefined && init.body !== null) {
      // As fetch does: a form or JSON text brings its own media type unless one was given.
      const encoded = new Response(init.body)
      const type = encoded.headers.get('content-type') // before the body is read: Bun forgets it after
      body = Buffer.from(await encoded.arrayBuffer())
      if (type && !Object.keys(headers).some((name) => name.toLowerCase() === 'content-type')) headers['content-type'] = type
      headers['content-length'] = String(body.byteLength)
    }
    return new Promise<Response>((resolve, reject) => {
      const fail = (message: string) => {
        clearTimeout(timer)
        request.destroy()
        reject(new Error(message))
      }
      const timer = setTimeout(() => fail(`${url.host} did not answer within ${TIMEOUT_MS / 1000} s`), TIMEOUT_MS)
      init.signal?.addEventListener('abort', () => fail(`the request to ${url.host} was cancelled`), { once: true })
      const request = (secure ? https : http).request(
        {
          protocol: url.protocol,
          host,
          port: url.port || (secure ? 443 : 80),
          path: `${url.pathname}${url.search}`,
          method: init.method ?? 'GET',
          headers,
          ...(secure && !isIP(host) ? { servername: host } : {}),
          ...(rules.ca ? { ca: [...tls.rootCertificates, rules.ca] } : {}),
          lookup: checkedLookup(rules),
        },
        (res) => {
          const status = res.statusCode ?? 0
          if (status < 200 || status > 599) return fail(`${url.host} answered with status ${status}`)
          if (status >= 300 && status < 400)
            return fail(`${url.host} answered with a redirect (to ${res.headers.location ?? 'nowhere'}), which is not followed`)
          const chunks: Buffer[] = []
          let total = 0
          res.on('data', (chunk: Buffer) => {
            total += chunk.byteLength
            if (total > MAX_BODY_BYTES) return fail(`${url.host} answered more than ${MAX_BODY_BYTES} bytes`)
            chunks.push(chunk)
          })
          res.on('error', (err) => fail(err.message))
          res.on('end', () => {
            clearTimeout(timer)
            const out = new Headers()
            for (const [name, value] of Object.entries(res.headers))
              for (const v of Array.isArray(value) ? value : value === undefined ? [] : [value]) out.append(name, v)
            const empty = status === 204 || status === 205 || init.method === 'HEAD'
            resolve(new Response(empty ? null : Buffer.concat(chunks, total), { status, headers: out }))
          })
        },
      )
      request.on('error', (err) => fail(`${url.host} could not be reached: ${err.message}`))
      request.end(body ?? undefined)
    })
  }
}
