import http from 'node:http'
import https from 'node:https'
import tls from 'node:tls'
import { isIP } from 'node:net'
import { checkedLookup, hostOf, isPublicAddress, type ResolveHost } from './address-policy'

/**
 * GET of a URL a caller named (an image block's URL), under the webhook rules (spec 4.5): https
 * only, and every address the host resolves to must be public, checked when the connection is made
 * so a name cannot be rebound to an inside address between the check and the request. Redirects
 * are refused: each hop would need the same check. At most `maxBytes` are read.
 */
export interface PublicGetOptions {
  maxBytes: number
  timeoutMs: number
  resolve: ResolveHost
  /** AGENTD_WEBHOOK_ALLOW_PRIVATE (tests only): http and inside addresses are allowed too. */
  allowPrivate: boolean
  /** PEM of a CA trusted besides the system's (AGENTD_FETCH_CA_FILE, tests only). */
  ca?: string | null
  /** Ends the request early (the create's fetch budget ran out: fetch-budget.ts). */
  signal?: AbortSignal
}

export interface Fetched {
  bytes: Uint8Array
  contentType: string | null
}

/** Why a fetch failed, in words a caller can act on. */
export class FetchRefused extends Error {
  override name = 'FetchRefused'
}

/** The body was larger than `maxBytes`: what was read of it is dropped. */
export class FetchTooLarge extends FetchRefused {
  override name = 'FetchTooLarge'
}

/**
 * A caller's fetch of public URLs (images, skills) under the server's rules, each within its
 * create's budget (the signal); 10 s per request.
 */
export function publicGetter(rules: Pick<PublicGetOptions, 'resolve' | 'allowPrivate' | 'ca'>) {
  return (url: string, maxBytes: number, signal: AbortSignal) => publicGet(url, { ...rules, maxBytes, timeoutMs: 10_000, signal })
}

export function publicGet(raw: string, options: PublicGetOptions): Promise<Fetched> {
  // A status other than 200 is refused as its headers come: its body is not read.
  const refuse = (status: number, host: string) => (status === 200 ? null : `${host} answered ${status}`)
  return publicExchange(raw, { method: 'GET', headers: {}, body: null }, { ...options, refuse }).then(({ headers, bytes }) => ({
    bytes,
    contentType: headers['content-type']?.split(';', 1)[0]?.trim().toLowerCase() || null,
  }))
}

/** One request of publicExchange. */
export interface ExchangeRequest {
  method: string
  headers: Record<string, string>
  body: Buffer | null
}

/** Its answer: the status, the headers, the whole body. */
export interface ExchangeAnswer {
  status: number
  headers: http.IncomingHttpHeaders
  bytes: Uint8Array
}

/**
 * One request under the outbound rules (above): the URL and every address checked, no redirect
 * followed, the answer's body read whole up to `maxBytes`, within `timeoutMs` and the `signal`.
 * `refuse` may turn a status down as its headers come (its words become the refusal). Every way
 * it fails is a FetchRefused (FetchTooLarge past `maxBytes`) saying why. publicGet and publicFetch
 * (public-fetch.ts) are this, for a caller's URLs and for servers someone else names.
 */
export function publicExchange(
  raw: string,
  init: ExchangeRequest,
  options: PublicGetOptions & { refuse?: (status: number, host: string) => string | null },
): Promise<ExchangeAnswer> {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return Promise.reject(new FetchRefused(`${JSON.stringify(raw)} is not a URL`))
  }
  const secure = url.protocol === 'https:'
  if (!secure && !(options.allowPrivate && url.protocol === 'http:'))
    return Promise.reject(new FetchRefused(`${url.origin} is not an https URL`))
  const host = hostOf(url)
  if (isIP(host) && !isPublicAddress(host) && !options.allowPrivate)
    return Promise.reject(new FetchRefused(`${host} is not a public address`))
  if (options.signal?.aborted) return Promise.reject(new FetchRefused(`${url.host} was not asked: the time for fetches ran out`))
  return new Promise<ExchangeAnswer>((resolve, reject) => {
    let settled = false
    const settle = () => {
      settled = true
      clearTimeout(timer)
      options.signal?.removeEventListener('abort', aborted)
    }
    const fail = (message: string, tooLarge = false) => {
      if (settled) return
      settle()
      request.destroy()
      reject(tooLarge ? new FetchTooLarge(message) : new FetchRefused(message))
    }
    const timer = setTimeout(() => fail(`${url.host} did not answer within ${options.timeoutMs / 1000} s`), options.timeoutMs)
    const aborted = () => fail(`${url.host} had not answered when the time for fetches ran out`)
    options.signal?.addEventListener('abort', aborted, { once: true })
    const lookup = checkedLookup(options)
    const request = (secure ? https : http).request(
      {
        protocol: url.protocol,
        host,
        port: url.port || (secure ? 443 : 80),
        path: `${url.pathname}${url.search}`,
        method: init.method,
        headers: { 'user-agent': 'agentd', ...init.headers, ...(init.body ? { 'content-length': String(init.body.byteLength) } : {}) },
        ...(secure && !isIP(host) ? { servername: host } : {}),
        ...(options.ca ? { ca: [...tls.rootCertificates, options.ca] } : {}),
        lookup,
      },
      (res) => {
        const status = res.statusCode ?? 0
        if (status >= 300 && status < 400)
          return fail(`${url.host} answered with a redirect (to ${res.headers.location ?? 'nowhere'}), which is not followed`)
        const refusal = options.refuse?.(status, url.host)
        if (refusal) return fail(refusal)
        const declared = Number(res.headers['content-length'] ?? NaN)
        if (declared > options.maxBytes) return fail(`${url.href} is larger than ${options.maxBytes} bytes`, true)
        const chunks: Buffer[] = []
        let total = 0
        res.on('data', (chunk: Buffer) => {
          total += chunk.byteLength
          if (total > options.maxBytes) return fail(`${url.href} is larger than ${options.maxBytes} bytes`, true)
          chunks.push(chunk)
        })
        res.on('end', () => {
          if (settled) return
          settle()
          resolve({ status, headers: res.headers, bytes: new Uint8Array(Buffer.concat(chunks, total)) })
        })
        res.on('error', (err) => fail(err.message))
      },
    )
    request.on('error', (err) => fail(`${url.host} could not be reached: ${err.message}`))
    request.end(init.body ?? undefined)
  })
}
