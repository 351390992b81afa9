import { createHash } from 'node:crypto'
import { chmodSync, mkdirSync, rmSync } from 'node:fs'
import { createConnection, createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { unreadBytes } from './socket-queue'

/**
 * The gateway relay. An isolated sandbox has no network but its own loopback; the one service it
 * may reach is agentd's model gateway. On the host, a Unix socket per sandbox forwards each
 * connection to the gateway's TCP address. In the sandbox's network namespace, `socat` listens on
 * 127.0.0.1:<gateway port> and opens one connection to that socket per incoming connection
 * (`innerRelayArgs`): bwrap runs it on the host in the sandbox's network namespace; gVisor runs it
 * inside the container, with the socket's folder bound in at `SANDBOX_RELAY_DIR`. Nothing else on
 * the host is reachable: there is no route out of the sandbox's network namespace.
 *
 * The same port is the sandbox's HTTP proxy (HTTP_PROXY and HTTPS_PROXY name it): the relay looks
 * at the first bytes of each connection, and a proxy request (`CONNECT host:port`, or an
 * absolute-form `GET http://host/...`) goes to the sandbox's egress hook (agentd's egress proxy,
 * src/egress), or is refused with a 403 when the sandbox has none; anything else goes to the
 * gateway as before, the bytes already read first.
 */

/** Where the relay socket's folder appears inside a gVisor sandbox. */
export const SANDBOX_RELAY_DIR = '/run/agentd/relay'
export const RELAY_SOCKET = 'gateway.sock'

/**
 * Default folder for the drivers' runtime files (relay sockets, runsc state): under /run as root,
 * since they do not outlive a reboot, and short, since Unix socket paths must stay under 108 bytes.
 */
export function defaultRunRoot(): string {
  return process.getuid?.() === 0 ? '/run/agentd' : join(tmpdir(), `agentd-${process.getuid?.() ?? 'user'}`)
}

/** The host folder holding one sandbox's relay socket (short and stable for a given sandbox id). */
export function relayDir(relayRoot: string, sandboxId: string): string {
  return join(relayRoot, createHash('sha256').update(sandboxId).digest('hex').slice(0, 16))
}

/** How long a reply the gateway finished may take to be read by the sandbox before its connection is dropped. */
const RELAY_FLUSH_MS = 10_000

/** At most this many connections through a sandbox's relay at once (each is a socat process). */
export const RELAY_MAX_CONNECTIONS = 64

/**
 * A gateway connection that passes no byte either way for this long is closed (contract section
 * 11), whether a request is in progress on it or not: a model stream the provider keeps silent
 * that long is cut too, as the CLIs' own stream idle limits do (Codex's is 5 minutes); the
 * scripted model's stalls send keepalives. Not while the relay is held (a frozen sandbox reads nothing).
 */
export const RELAY_IDLE_MS = 5 * 60_000

/** Hands a sandbox's proxy request (its first bytes already read, in `head`) to the egress proxy. */
export type EgressHook = (inner: Socket, head: Buffer) => void

/** How much of a connection's start the relay reads, and for how long, to tell a proxy request from a gateway one. */
const SNIFF_MAX_BYTES = 16 * 1024
const SNIFF_MS = 10_000

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
const SCHEME = /^[A-Za-z][A-Za-z0-9+.-]*/

/**
 * Whether a connection that began with `head` is a proxy request: true for `CONNECT ...` and for an
 * absolute-form request line (`GET http://host/path HTTP/1.1`, any scheme), false for anything else
 * (the gateway's `POST /v1/...`), null when the bytes so far could still be either. Decides within
 * the first few dozen bytes: a method longer than 20 characters or a scheme longer than 16 is no
 * proxy request.
 */
export function isProxyRequest(head: Buffer): boolean | null {
  const text = head.subarray(0, 64).toString('latin1')
  const end = text.search(/[\r\n]/)
  const complete = end >= 0
  const line = complete ? text.slice(0, end) : text
  const space = line.indexOf(' ')
  if (space < 0) return !complete && line.length <= 20 && (line === '' || TOKEN.test(line)) ? null : false
  const method = line.slice(0, space)
  if (!TOKEN.test(method)) return false
  if (method === 'CONNECT') return true
  const target = line.slice(space + 1)
  const scheme = SCHEME.exec(target)?.[0] ?? ''
  if (scheme.length > 16) return false
  const after = target.slice(scheme.length)
  if (after.startsWith('://')) return true
  // Still on its way: `GET h`, `GET http:/`.
  return !complete && '://'.startsWith(after) && (scheme !== '' || target === '') ? null : false
}

export interface RelayOptions {
  /** The sandbox's egress proxy; without one a proxy request is answered 403 (no network). */
  egress?: EgressHook
  /**
   * Connections from the sandbox open at once past which a new one is closed at once
   * (RELAY_MAX_CONNECTIONS: contract section 11). Infinity for a relay shared by many sandboxes,
   * whose socat children already bound each one.
   */
  maxConnections?: number
  /** RELAY_IDLE_MS, unless a test needs it short. */
  idleMs?: number
}

/** socat's path on this host (the sandbox-side half of the relay runs it), or null. */
export function findSocat(): string | null {
  return Bun.which('socat', { PATH: '/usr/bin:/usr/local/bin:/bin' })
}

/**
 * The sandbox-side half: socat on the sandbox's loopback, forking one child per connection (at most
 * RELAY_MAX_CONNECTIONS), each opening its own connection to the relay socket at `socketPath` and
 * closing it when the request is done (so no host socket stays open between requests, which a
 * gVisor checkpoint could not save).
 */
export function innerRelayArgs(socat: string, port: number, socketPath: string): string[] {
  return [
    socat,
    '-t',
    '0.1',
    `TCP-LISTEN:${port},bind=127.0.0.1,reuseaddr,fork,max-children=${RELAY_MAX_CONNECTIONS}`,
    `UNIX-CONNECT:${socketPath}`,
  ]
}

/** The `/proc/net/tcp` fragment of a socket listening on 127.0.0.1:<port>, to wait for the relay. */
export function listenPattern(port: number): string {
  return `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')} 00000000:0000 0A`
}

/** The host half: a Unix socket that forwards every connection to the gateway over TCP, or a proxy request to the egress hook. */
export class GatewayRelay {
  private server: Server | null = null
  /** Each open connection's sandbox side, with where it goes: its gateway side, the egress proxy, or not known yet. */
  private readonly open = new Map<Socket, Socket | 'egress' | 'reading'>()
  /** Egress connections whose writes to the sandbox wait (corked) while held. */
  private readonly corked = new Set<Socket>()
  private held = false
  private readonly maxConnections: number
  private readonly idleMs: number
  /** When each gateway connection last passed a byte either way. */
  private readonly lastActive = new Map<Socket, number>()

  constructor(
    readonly dir: string,
    private readonly gateway: { host: string; port: number },
    private readonly options: RelayOptions = {},
  ) {
    this.maxConnections = options.maxConnections ?? RELAY_MAX_CONNECTIONS
    this.idleMs = options.idleMs ?? RELAY_IDLE_MS
  }

  get socketPath(): string {
    return join(this.dir, RELAY_SOCKET)
  }

  /** Connections from the sandbox open right now. */
  get connections(): number {
    return this.open.size
  }

  /** Bytes of the gateway's passed to the sandbox side, over the gateway connections open now. */
  get passedBytes(): number {
    let sum = 0
    for (const [inner, outer] of this.open) if (typeof outer !== 'string') sum += inner.bytesWritten
    return sum
  }

  async start(): Promise<void> {
    if (this.server) return
    mkdirSync(this.dir, { recursive: true, mode: 0o755 })
    rmSync(this.socketPath, { force: true })
    const server = createServer((inner) => this.accept(inner))
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(this.socketPath, () => resolve())
    })
    chmodSync(this.socketPath, 0o777) // a sandbox may run as another uid than the server
    server.unref() // the relay alone is no reason to keep agentd running
    this.server = server
  }

  /** A new connection from the sandbox: refused past the cap, else read until it is known where it goes. */
  private accept(inner: Socket): void {
    if (this.open.size >= this.maxConnections) {
      inner.destroy()
      return
    }
    this.open.set(inner, 'reading')
    inner.on('close', () => {
      this.open.delete(inner)
      this.corked.delete(inner)
    })
    inner.on('error', () => inner.destroy())
    const chunks: Buffer[] = []
    let length = 0
    const route = () => {
      clearTimeout(timer)
      inner.off('data', onData)
      inner.off('end', route)
      inner.pause()
      const head = Buffer.concat(chunks, length)
      if (inner.destroyed) return
      if (isProxyRequest(head) === true) this.egress(inner, head)
      else if (length > 0) this.forward(inner, head)
      else inner.end() // closed before a byte: nothing to pass on
    }
    const onData = (chunk: Buffer) => {
      chunks.push(chunk)
      length += chunk.length
      if (length >= SNIFF_MAX_BYTES || isProxyRequest(Buffer.concat(chunks, length)) !== null) route()
    }
    // Undecided for that long (a few bytes sent, then nothing): it goes to the gateway, as before the proxy.
    const timer = setTimeout(route, SNIFF_MS)
    inner.on('data', onData)
    inner.on('end', route)
  }

  private egress(inner: Socket, head: Buffer): void {
    if (!this.options.egress) {
      const body = 'this sandbox has no network\n'
      inner.end(`HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`)
      inner.resume() // what else it sends is dropped
      setTimeout(() => inner.destroy(), RELAY_FLUSH_MS).unref()
      return
    }
    this.open.set(inner, 'egress')
    if (this.held) this.cork(inner)
    this.options.egress(inner, head)
  }

  private cork(inner: Socket): void {
    if (this.corked.has(inner)) return
    this.corked.add(inner)
    inner.cork()
  }

  /** A gateway connection: `head` (the bytes read to route it) first, then everything else. */
  private forward(inner: Socket, head: Buffer): void {
    const outer = createConnection({ host: this.gateway.host, port: this.gateway.port })
    this.open.set(inner, outer)
    if (inner.readableEnded) outer.end(head)
    else {
      outer.write(head)
      inner.pipe(outer)
    }
    if (this.held) outer.pause()
    else outer.pipe(inner)
    const fail = () => {
      inner.destroy()
      outer.destroy()
    }
    inner.on('error', fail)
    outer.on('error', fail)
    // The gateway hanging up right after its reply is normal: the sandbox side is ended, not
    // destroyed, so the reply still waiting in its write buffer reaches the sandbox first. (A
    // destroy here dropped it: the CLI waited for a reply the gateway had sent.)
    outer.on('close', () => {
      inner.end()
      // A sandbox side that never reads the rest is let go of after a while.
      setTimeout(() => inner.destroy(), RELAY_FLUSH_MS).unref()
    })
    inner.on('close', () => {
      outer.destroy()
      this.lastActive.delete(inner)
    })
    this.closeWhenIdle(inner, outer, fail)
  }

  /** Calls `close` once the gateway connection passed no byte either way for idleMs (while not held). */
  private closeWhenIdle(inner: Socket, outer: Socket, close: () => void): void {
    const active = () => this.lastActive.set(inner, performance.now())
    active()
    inner.on('data', active)
    outer.on('data', active)
    const check = () => {
      const last = this.lastActive.get(inner)
      if (last === undefined) return // closed
      // Held, the sandbox is frozen: its quiet is not its own. The clock starts again at release.
      if (this.held) {
        setTimeout(check, this.idleMs).unref()
        return
      }
      const quiet = performance.now() - last
      if (quiet >= this.idleMs) close()
      else setTimeout(check, this.idleMs - quiet).unref()
    }
    setTimeout(check, this.idleMs).unref()
  }

  /**
   * Stops passing the gateway's bytes to the sandbox until `release`, and waits (up to `timeoutMs`)
   * until the sandbox has read every byte already passed: for a sandbox about to be frozen, so that
   * nothing waits in a socket of a frozen sandbox (a gVisor sandbox frozen with `runsc pause` lost
   * such bytes, and the CLI waited for its reply for ever). Held, they wait in the gateway
   * connection; an egress connection's wait in its sandbox side, corked (and the origin, pushed
   * back, stops sending). False when some were still unread at the deadline.
   */
  async hold(timeoutMs: number): Promise<boolean> {
    this.held = true
    for (const [inner, outer] of this.open) {
      if (outer === 'egress') this.cork(inner)
      else if (outer !== 'reading') {
        outer.unpipe(inner)
        outer.pause()
      }
    }
    const deadline = Date.now() + timeoutMs
    // A corked side's own buffer waits in agentd until release: only what reached its socket counts.
    const unread = () =>
      [...this.open.keys()].some(
        (inner) => !inner.destroyed && unreadBytes(inner) - (this.corked.has(inner) ? inner.writableLength : 0) > 0,
      )
    while (unread() && Date.now() < deadline) await Bun.sleep(2)
    return !unread()
  }

  /** Passes the gateway's (and the egress proxy's) bytes on again, once the sandbox runs. */
  release(): void {
    if (!this.held) return
    this.held = false
    // A frozen sandbox was quiet for none of its own reasons: idle time counts from now.
    for (const inner of this.lastActive.keys()) this.lastActive.set(inner, performance.now())
    for (const [inner, outer] of this.open) if (typeof outer !== 'string') outer.pipe(inner)
    for (const inner of this.corked) inner.uncork()
    this.corked.clear()
  }

  /**
   * Ends every open connection and waits until the sandbox side has closed them too (its relay
   * child exits 0.1 s later), so no host socket is held; false if some stayed open. Only when no
   * turn runs: a connection may be a model request in flight, which the CLI reads as a failed turn.
   */
  async drain(timeoutMs: number): Promise<boolean> {
    for (const socket of this.open.keys()) socket.end()
    const deadline = Date.now() + timeoutMs
    while (this.open.size > 0 && Date.now() < deadline) await Bun.sleep(5)
    return this.open.size === 0
  }

  async stop(): Promise<void> {
    const server = this.server
    this.server = null
    for (const socket of this.open.keys()) socket.destroy()
    this.open.clear()
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()))
    rmSync(this.dir, { recursive: true, force: true })
  }
}

/** Whether something accepts connections on the Unix socket at `path`. */
export function listening(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ path })
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}
