import http from 'node:http'
import https from 'node:https'
import { isIP } from 'node:net'
import { Readable } from 'node:stream'
import { checkedLookup, hostOf, isPublicAddress, type ResolveHost } from '../egress/address-policy'

/**
 * Headers of one hop only, what the proxy sets itself, and what would tell the server about the
 * host side: never passed on (nor any header the request's own `Connection` names).
 */
const DROPPED = new Set([
  'connection',
  'keep-alive',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'authorization',
  'cookie',
  'content-length',
  'forwarded',
  'x-forwarded-for',
  'x-forwarded-host',
  'x-forwarded-proto',
  'x-real-ip',
])
/** A tool server that has not begun to answer by then is given up on (504). */
const HEADERS_TIMEOUT_MS = 30_000

export interface ProxyTarget {
  url: string
  token: string | null
  /** Why the server cannot be called now (a built-in connector whose sign-in must be renewed): answered 503. */
  refusal?: string
}

export interface ProxyOptions {
  resolve: ResolveHost
  /** AGENTD_WEBHOOK_ALLOW_PRIVATE (tests only). */
  allowPrivate: boolean
  ca?: string | null
  /** Called once when the exchange is over (answered to the end, failed or abandoned). */
  onDone?: () => void
}

/**
 * The egress proxy's one request: the CLI's request to its tool server, sent to the server's URL
 * (the endpoint itself, nothing below it) with the server's own bearer token in place of the
 * gateway key, and streamed back both ways (MCP's streamable HTTP answers with JSON or an event
 * stream). The address is checked as the connection is made, as for webhooks, so a name that
 * resolved to a public address at create time cannot be rebound to an inside one.
 */
export function proxyToolRequest(req: Request, target: ProxyTarget, options: ProxyOptions): Promise<Response> {
  let finished = false
  const done = () => {
    if (finished) return
    finished = true
    options.onDone?.()
  }
  const refuse = (why: string, status = 502) => {
    done()
    return Response.json({ error: `the tool server cannot be reached: ${why}` }, { status })
  }
  if (target.refusal) return Promise.resolve(refuse(target.refusal, 503))
  const url = new URL(target.url)
  const secure = url.protocol === 'https:'
  const host = hostOf(url)
  if (!secure && !options.allowPrivate) return Promise.resolve(refuse('not an https URL'))
  if (isIP(host) && !isPublicAddress(host) && !options.allowPrivate) return Promise.resolve(refuse(`${host} is not a public address`))
  const named = new Set((req.headers.get('connection') ?? '').split(',').map((h) => h.trim().toLowerCase()))
  const headers: Record<string, string> = {}
  req.headers.forEach((value, name) => {
    const key = name.toLowerCase()
    if (!DROPPED.has(key) && !named.has(key)) headers[name] = value
  })
  if (target.token) headers.authorization = `Bearer ${target.token}`
  return new Promise<Response>((resolve) => {
    let answered = false
    const answer = (response: Response) => {
      if (answered) return
      answered = true
      clearTimeout(timer)
      resolve(response)
    }
    const lookup = checkedLookup(options)
    const upstream = (secure ? https : http).request(
      {
        protocol: url.protocol,
        host,
        port: url.port || (secure ? 443 : 80),
        path: `${url.pathname}${url.search}`,
        method: req.method,
        headers,
        ...(secure && !isIP(host) ? { servername: host } : {}),
        ...(options.ca ? { ca: options.ca } : {}),
        lookup,
      },
      (res) => {
        res.on('error', () => {}) // the stream below ends; the exchange is over either way
        res.on('close', done)
        const status = res.statusCode ?? 0
        if (status < 200 || status > 599) {
          res.destroy()
          return answer(refuse(`it answered with status ${status}`))
        }
        const out = new Headers()
        for (const [name, value] of Object.entries(res.headers)) {
          if (value === undefined || DROPPED.has(name)) continue
          for (const v of Array.isArray(value) ? value : [value]) out.append(name, v)
        }
        const bodiless = req.method === 'HEAD' || status === 204 || status === 205 || status === 304
        try {
          answer(new Response(bodiless ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>), { status, headers: out }))
        } catch (err) {
          res.destroy()
          answer(refuse((err as Error).message))
        }
        if (bodiless) res.resume()
      },
    )
    const timer = setTimeout(() => {
      upstream.destroy()
      answer(refuse(`no answer within ${HEADERS_TIMEOUT_MS / 1000} s`, 504))
    }, HEADERS_TIMEOUT_MS)
    upstream.on('error', (err) => answer(refuse(err.message)))
    upstream.on('close', () => {
      if (!answered) answer(refuse('the connection closed'))
    })
    // The CLI went away (its turn ended): the upstream request goes too.
    req.signal.addEventListener('abort', () => upstream.destroy(), { once: true })
    if (!req.body) return upstream.end()
    const source = Readable.fromWeb(req.body as import('node:stream/web').ReadableStream<Uint8Array>)
    source.on('error', (err) => upstream.destroy(err))
    source.pipe(upstream)
  })
}
