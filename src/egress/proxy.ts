import { connect, isIPv6, type Socket } from 'node:net'
import { isProxyRequest } from '../../sandbox/relay'
import { AddressRefused, resolvePublic, type ResolveHost } from './address-policy'
import { normalizeHost, type AllowList } from './allowlist'

/**
 * The egress proxy: what a Project's sandbox reaches as HTTP_PROXY and HTTPS_PROXY (contract
 * section 10). The sandbox's relay (sandbox/relay.ts) hands it each connection that begins with a
 * proxy request; the relay is the sandbox's own, so the connection's allow list is the sandbox's.
 *
 * - `CONNECT host:port`: a tunnel, the bytes passed as they are (TLS end to end; agentd never sees
 *   the plaintext).
 * - `GET http://host[:port]/path HTTP/1.1` (absolute form): plain http, forwarded in origin form
 *   (`GET /path`), hop-by-hop and Proxy-* headers dropped, `Host` set from the URL, with
 *   `Connection: close`: one request per connection, the body and the answer streamed as bytes.
 *
 * Either way the host and port must be on the list (else 403 and a log line `egress denied:`), and
 * every address the proxy resolves the name to must be public (section 7; a literal likewise), else
 * 403 and `egress refused:`, unless `allowPrivate` (AGENTD_EGRESS_ALLOW_PRIVATE, tests only). The
 * connection goes to the address that was checked, never to the name again (no DNS rebinding).
 * Log lines name only `host:port`: never a header, a body or a URL's path or query.
 */

export { isProxyRequest }

/** A request head longer than this is answered 431. */
export const MAX_HEAD_BYTES = 16 * 1024
/** A head not complete by then: the connection is closed. */
export const HEAD_TIMEOUT_MS = 10_000
/** A connection through the proxy with no byte either way for this long is closed (contract section 11). */
export const EGRESS_IDLE_MS = 5 * 60_000
const CONNECT_TIMEOUT_MS = 10_000
/** How long an answer the proxy wrote may take to be read before the connection is dropped. */
const FLUSH_MS = 10_000

/** One sandbox, as the proxy sees it. */
export interface EgressSession {
  allow: AllowList
  /** A line for the session's logs. */
  log(line: string): void
  /** Called once, when the connection is over. */
  onDone?(): void
}

export interface EgressProxyOptions {
  resolve: ResolveHost
  /** AGENTD_EGRESS_ALLOW_PRIVATE (tests only): allowed hosts may resolve to any address. */
  allowPrivate: boolean
  /** How long connecting to the host may take, over all its addresses (default 10 s). */
  connectTimeoutMs?: number
  /** Idle connections are closed after this long (default 5 minutes). */
  idleMs?: number
  /** How long the sandbox has to send a whole request head (default 10 s). */
  headTimeoutMs?: number
}

/** A request head, parsed: `target` as written; `headers` in order, names as written. */
interface RequestHead {
  method: string
  target: string
  version: string
  headers: [string, string][]
}

/** Where a request goes: `host` normalized (IPv6 without brackets), `path` the origin-form target (plain http only). */
interface Target {
  host: string
  port: number
  path: string | null
}

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
const HEADER = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*(.*?)[ \t]*$/
/** Headers of one hop, and what the proxy sets itself: never passed on (nor those the request's `Connection` names). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'host',
])
/** Framing of the body, passed on as it is (the body is), even when `Connection` names them. */
const FRAMING = new Set(['content-length', 'transfer-encoding'])

const REASONS: Record<number, string> = {
  400: 'Bad Request',
  403: 'Forbidden',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
  504: 'Gateway Timeout',
}

export class EgressProxy {
  private readonly connectTimeoutMs: number
  private readonly idleMs: number
  private readonly headTimeoutMs: number

  constructor(private readonly options: EgressProxyOptions) {
    this.connectTimeoutMs = options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS
    this.idleMs = options.idleMs ?? EGRESS_IDLE_MS
    this.headTimeoutMs = options.headTimeoutMs ?? HEAD_TIMEOUT_MS
  }

  /**
   * Takes over one connection from the sandbox whose first bytes (`head`, at least the start of a
   * proxy request) were already read: reads the rest of the request head, decides, and answers or
   * connects. `session.onDone` is called once the sandbox side has closed.
   */
  handle(inner: Socket, head: Buffer, session: EgressSession): void {
    let finished = false
    inner.once('close', () => {
      if (finished) return
      finished = true
      session.onDone?.()
    })
    inner.on('error', () => inner.destroy())
    let buffer = head
    const timer = setTimeout(() => inner.destroy(), this.headTimeoutMs)
    const take = () => {
      const end = buffer.indexOf('\r\n\r\n')
      if (end < 0 || end + 4 > MAX_HEAD_BYTES) {
        if (buffer.length < MAX_HEAD_BYTES) return
        stop()
        return this.answer(inner, 431, 'the request head is too large\n')
      }
      stop()
      this.serve(inner, buffer.subarray(0, end + 4), buffer.subarray(end + 4), session).catch(() => inner.destroy())
    }
    const onData = (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk])
      take()
    }
    const stop = () => {
      clearTimeout(timer)
      inner.off('data', onData)
      inner.pause()
    }
    inner.on('data', onData)
    inner.resume()
    take()
  }

  /** The head is whole (`rest`: what came after it): check, connect, and pass the bytes both ways. */
  private async serve(inner: Socket, rawHead: Buffer, rest: Buffer, session: EgressSession): Promise<void> {
    const head = parseHead(rawHead)
    const target = head && targetOf(head)
    if (!head || !target) return this.answer(inner, 400, 'not a proxy request this proxy understands\n')
    if (target.path !== null && !framingIsClear(head.headers)) return this.answer(inner, 400, 'the request body has no clear length\n')
    const where = `${isIPv6(target.host) ? `[${target.host}]` : target.host}:${target.port}`
    if (!session.allow.allows(target.host, target.port)) {
      session.log(`egress denied: ${where}`)
      return this.answer(inner, 403, `${where} is not on this sandbox's network allow list\n`)
    }
    let addresses: string[]
    try {
      addresses = await resolvePublic(target.host, this.options)
    } catch (err) {
      if (err instanceof AddressRefused) {
        const what = err.address === target.host ? 'is a non-public address' : `resolves to a non-public address (${err.address})`
        session.log(`egress refused: ${where} ${what}`)
        return this.answer(inner, 403, `${where} is not a public address\n`)
      }
      session.log(`egress failed: ${where} does not resolve`)
      return this.answer(inner, 502, `${where} does not resolve\n`)
    }
    if (inner.destroyed) return
    let outer: Socket
    try {
      outer = await this.connectFirst(addresses, target.port, inner)
    } catch (err) {
      const timedOut = (err as Error).message === 'timeout'
      session.log(`egress failed: ${where} ${timedOut ? 'did not answer' : 'refused the connection'}`)
      return this.answer(inner, timedOut ? 504 : 502, `${where} cannot be reached\n`)
    }
    if (inner.destroyed) return void outer.destroy()
    if (target.path === null) inner.write('HTTP/1.1 200 Connection Established\r\n\r\n')
    else outer.write(originHead(head, target))
    if (rest.length > 0) outer.write(rest)
    this.pipe(inner, outer)
  }

  /** Both ways, until either side closes or neither sends for `idleMs`. */
  private pipe(inner: Socket, outer: Socket): void {
    const close = () => {
      inner.destroy()
      outer.destroy()
    }
    outer.on('error', close)
    inner.on('error', close)
    inner.setTimeout(this.idleMs, close)
    outer.setTimeout(this.idleMs, close)
    inner.on('close', () => outer.destroy())
    // The host hanging up after its answer: the sandbox side is ended, not destroyed, so the
    // answer still in its write buffer reaches the sandbox first.
    outer.on('close', () => {
      inner.end()
      setTimeout(() => inner.destroy(), FLUSH_MS).unref()
    })
    inner.pipe(outer)
    outer.pipe(inner)
  }

  /** A connection to the first of `addresses` that takes one, all within the connect timeout. */
  private async connectFirst(addresses: string[], port: number, inner: Socket): Promise<Socket> {
    const deadline = Date.now() + this.connectTimeoutMs
    let last: Error = new Error('refused')
    for (const address of addresses) {
      const left = deadline - Date.now()
      if (left <= 0 || inner.destroyed) break
      try {
        return await new Promise<Socket>((resolve, reject) => {
          const socket = connect({ host: address, port })
          const timer = setTimeout(() => {
            socket.destroy()
            reject(new Error('timeout'))
          }, left)
          // Settles once; an error after the connect is the pipe's to handle.
          socket.on('error', (err) => {
            clearTimeout(timer)
            socket.destroy()
            reject(err)
          })
          socket.once('connect', () => {
            clearTimeout(timer)
            resolve(socket)
          })
        })
      } catch (err) {
        last = err as Error
      }
    }
    throw Date.now() >= deadline ? new Error('timeout') : last
  }

  /** A short answer from the proxy itself, after which the connection closes. */
  private answer(inner: Socket, status: number, body: string): void {
    if (inner.destroyed) return
    inner.end(
      `HTTP/1.1 ${status} ${REASONS[status]}\r\nContent-Type: text/plain\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    )
    inner.resume() // whatever else it sends is dropped
    setTimeout(() => inner.destroy(), FLUSH_MS).unref()
  }
}

/** A request head (up to its blank line), or null when it is not one: CRLF lines only, no folded headers. */
export function parseHead(raw: Buffer): RequestHead | null {
  const lines = raw.toString('latin1').slice(0, -4).split('\r\n')
  if (lines.some((line) => line.includes('\r') || line.includes('\n') || line.includes('\0'))) return null
  const parts = lines[0]!.split(' ')
  if (parts.length !== 3) return null
  const [method, target, version] = parts as [string, string, string]
  if (!TOKEN.test(method) || target === '' || !/^HTTP\/1\.[01]$/.test(version)) return null
  const headers: [string, string][] = []
  for (const line of lines.slice(1)) {
    const match = HEADER.exec(line)
    if (!match) return null
    headers.push([match[1]!, match[2]!])
  }
  return { method, target, version, headers }
}

/** `host:port` (IPv6 in brackets) into a host and a port, or null. */
function authority(text: string, defaultPort: number | null): { host: string; port: number } | null {
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]]+)(?::([0-9]{1,5}))?$/.exec(text)
  if (!match) return null
  const port = match[2] === undefined ? defaultPort : Number(match[2])
  const host = normalizeHost(match[1]!)
  if (port === null || port < 1 || port > 65535 || host === null) return null
  return { host, port }
}

/** Where the request goes: a CONNECT's authority (a port required), or an absolute `http://` URL's. */
function targetOf(head: RequestHead): Target | null {
  if (head.method === 'CONNECT') {
    const hostPort = authority(head.target, null)
    return hostPort && { ...hostPort, path: null }
  }
  const match = /^http:\/\/([^/?#]*)([^#]*)$/i.exec(head.target)
  if (!match || match[1]!.includes('@')) return null
  const hostPort = authority(match[1]!, 80)
  if (!hostPort) return null
  const path = match[2] === '' ? '/' : match[2]!.startsWith('?') ? `/${match[2]}` : match[2]!
  return { ...hostPort, path }
}

/** The body's length is told once and one way (a Content-Length and a Transfer-Encoding both, or two lengths, are refused). */
function framingIsClear(headers: [string, string][]): boolean {
  const lengths = headers.filter(([name]) => name.toLowerCase() === 'content-length').map(([, value]) => value)
  const chunked = headers.some(([name]) => name.toLowerCase() === 'transfer-encoding')
  if (lengths.length > 0 && chunked) return false
  return lengths.length <= 1 && lengths.every((value) => /^[0-9]{1,15}$/.test(value))
}

/** The head as the host gets it: origin form, this hop's headers dropped, `Host` from the URL, `Connection: close`. */
function originHead(head: RequestHead, target: Target): string {
  const named = new Set(
    head.headers
      .filter(([name]) => name.toLowerCase() === 'connection')
      .flatMap(([, value]) => value.split(','))
      .map((name) => name.trim().toLowerCase())
      .filter((name) => !FRAMING.has(name)),
  )
  const host = `${isIPv6(target.host) ? `[${target.host}]` : target.host}${target.port === 80 ? '' : `:${target.port}`}`
  const lines = [`${head.method} ${target.path} ${head.version}`, `Host: ${host}`]
  for (const [name, value] of head.headers) {
    const key = name.toLowerCase()
    if (HOP_BY_HOP.has(key) || key.startsWith('proxy-') || named.has(key)) continue
    lines.push(`${name}: ${value}`)
  }
  lines.push('Connection: close')
  return `${lines.join('\r\n')}\r\n\r\n`
}
