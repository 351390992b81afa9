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
 * The sandbox-side half: socat on the sandbox's loopback, forking one child per connection (at most
 * RELAY_MAX_CONNECTIONS), each opening its own connection to the relay socket at `socketPath` and
 * closing it when the request is done (so no host socket stays open between requests, which a
 * gVisor checkpoint could not save).
 */
export function innerRelayArgs(socat: string, port: number, socketPath: string): string[] {
  return [socat, '-t', '0.1', `TCP-LISTEN:${port},bind=127.0.0.1,reuseaddr,fork,max-children=${RELAY_MAX_CONNECTIONS}`, `UNIX-CONNECT:${socketPath}`]
}

/** The `/proc/net/tcp` fragment of a socket listening on 127.0.0.1:<port>, to wait for the relay. */
export function listenPattern(port: number): string {
  return `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')} 00000000:0000 0A`
}

/** The host half: a Unix socket that forwards every connection to the gateway over TCP. */
export class GatewayRelay {
  private server: Server | null = null
  /** Each open connection's sandbox side, with its gateway side. */
  private readonly open = new Map<Socket, Socket>()
  private held = false

  constructor(
    readonly dir: string,
    private readonly gateway: { host: string; port: number },
  ) {}

  get socketPath(): string {
    return join(this.dir, RELAY_SOCKET)
  }

  /** Connections from the sandbox open right now. */
  get connections(): number {
    return this.open.size
  }

  /** Bytes of the gateway's passed to the sandbox side, over the connections open now. */
  get passedBytes(): number {
    let sum = 0
    for (const inner of this.open.keys()) sum += inner.bytesWritten
    return sum
  }

  async start(): Promise<void> {
    if (this.server) return
    mkdirSync(this.dir, { recursive: true, mode: 0o755 })
    rmSync(this.socketPath, { force: true })
    const server = createServer((inner) => this.forward(inner))
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(this.socketPath, () => resolve())
    })
    chmodSync(this.socketPath, 0o777) // a sandbox may run as another uid than the server
    server.unref() // the relay alone is no reason to keep agentd running
    this.server = server
  }

  private forward(inner: Socket): void {
    const outer = createConnection({ host: this.gateway.host, port: this.gateway.port })
    this.open.set(inner, outer)
    inner.pipe(outer)
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
      this.open.delete(inner)
    })
  }

  /**
   * Stops passing the gateway's bytes to the sandbox until `release`, and waits (up to `timeoutMs`)
   * until the sandbox has read every byte already passed: for a sandbox about to be frozen, so that
   * nothing waits in a socket of a frozen sandbox (a gVisor sandbox frozen with `runsc pause` lost
   * such bytes, and the CLI waited for its reply for ever). Held, they wait in the gateway
   * connection. False when some were still unread at the deadline.
   */
  async hold(timeoutMs: number): Promise<boolean> {
    this.held = true
    for (const [inner, outer] of this.open) {
      outer.unpipe(inner)
      outer.pause()
    }
    const deadline = Date.now() + timeoutMs
    const unread = () => [...this.open.keys()].some((inner) => !inner.destroyed && unreadBytes(inner) > 0)
    while (unread() && Date.now() < deadline) await Bun.sleep(2)
    return !unread()
  }

  /** Passes the gateway's bytes on again, once the sandbox runs. */
  release(): void {
    if (!this.held) return
    this.held = false
    for (const [inner, outer] of this.open) outer.pipe(inner)
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
