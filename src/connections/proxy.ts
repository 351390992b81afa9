import http from 'node:http'
import https from 'node:https'
import { isIP } from 'node:net'
import { Readable } from 'node:stream'
import { hostOf, isPublicAddress, type ResolveHost } from '../webhooks/url-policy'

/** Headers of one hop only, and what the proxy sets itself: never passed on. */
const HOP = new Set(['connection', 'keep-alive', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'host', 'authorization', 'cookie', 'content-length'])

export interface ProxyTarget {
  url: string
  token: string | null
}

export interface ProxyOptions {
  resolve: ResolveHost
  /** AGENTD_WEBHOOK_ALLOW_PRIVATE (tests only). */
  allowPrivate: boolean
  ca?: string | null
}

/**
 * The egress proxy's one request: the CLI's request to its tool server, sent on to the server's
 * URL (plus whatever path the CLI added below `/mcp/<name>`) with the server's own bearer token in
 * place of the gateway key, and streamed back both ways (MCP's streamable HTTP answers with JSON or
 * an event stream). The address is checked as the connection is made, as for webhooks, so a name
 * that resolved to a public address at create time cannot be rebound to an inside one.
 */
export function proxyToolRequest(req: Request, suffix: string, target: ProxyTarget, options: ProxyOptions): Promise<Response> {
  const base = new URL(target.url)
  const url = new URL(base.href)
  url.pathname = `${base.pathname.replace(/\/$/, '')}${suffix}` || '/'
  url.search = new URL(req.url).search || base.search
  const secure = url.protocol === 'https:'
  const host = hostOf(url)
  const refuse = (why: string) => Response.json({ error: `the tool server cannot be reached: ${why}` }, { status: 502 })
  if (!secure && !options.allowPrivate) return Promise.resolve(refuse('not an https URL'))
  if (isIP(host) && !isPublicAddress(host) && !options.allowPrivate) return Promise.resolve(refuse(`${host} is not a public address`))
  const headers: Record<string, string> = {}
  req.headers.forEach((value, name) => {
    if (!HOP.has(name.toLowerCase())) headers[name] = value
  })
  if (target.token) headers.authorization = `Bearer ${target.token}`
  return new Promise<Response>((resolve) => {
    const lookup = (hostname: string, opts: { all?: boolean }, callback: (err: Error | null, address: string | { address: string; family: number }[], family?: number) => void) => {
      const all = opts.all === true
      options.resolve(hostname).then((addresses) => {
        const inside = addresses.find((a) => !isPublicAddress(a))
        if (addresses.length === 0) return callback(new Error(`${hostname} does not resolve`), all ? [] : '', 0)
        if (inside && !options.allowPrivate) return callback(new Error(`${hostname} resolves to a non-public address (${inside})`), all ? [] : '', 0)
        if (all) callback(null, addresses.map((address) => ({ address, family: isIP(address) })))
        else callback(null, addresses[0]!, isIP(addresses[0]!))
      }, (err: Error) => callback(err, all ? [] : '', 0))
    }
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
        const out = new Headers()
        for (const [name, value] of Object.entries(res.headers)) {
          if (value === undefined || HOP.has(name)) continue
          for (const v of Array.isArray(value) ? value : [value]) out.append(name, v)
        }
        const body = req.method === 'HEAD' || res.statusCode === 204 || res.statusCode === 304 ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>)
        resolve(new Response(body, { status: res.statusCode ?? 502, headers: out }))
      },
    )
    upstream.on('error', (err) => resolve(refuse(err.message)))
    // The CLI went away (its turn ended): the upstream request goes too.
    req.signal.addEventListener('abort', () => upstream.destroy(), { once: true })
    if (!req.body) return upstream.end()
    Readable.fromWeb(req.body as import('node:stream/web').ReadableStream<Uint8Array>).pipe(upstream)
  })
}
