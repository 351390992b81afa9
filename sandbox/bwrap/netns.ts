import type { Subprocess } from 'bun'
import { readFileSync, readlinkSync } from 'node:fs'
import { GatewayRelay, innerRelayArgs } from '../relay'
import { refillSpares } from '../spare-refill'
import { spawnHelper } from '../spawn'

/**
 * Network namespaces for bwrap sandboxes. Each sandbox has one for its life, held by a process that
 * is `bwrap --unshare-net` (which brings up loopback) running socat on the host's file system: the
 * gateway relay on the namespace's 127.0.0.1:<port>, connecting to the host's relay socket. Every
 * exec of the sandbox enters it with `nsenter --net`. Making one takes a few tens of ms (a new
 * namespace, socat starting), so a pool keeps some ready per gateway address.
 *
 * The holder is host-side plumbing like the relay socket, not a process of the sandbox: it is not
 * in the sandbox's cgroups (moving two processes into three cgroups costs ~10 ms), it is not frozen
 * by park (nothing connects to it meanwhile), and the sandbox cannot see or signal it. Its forks are
 * bounded by socat's max-children; it dies with its sandbox, or with agentd (--die-with-parent).
 */

export function netHolderArgs(socat: string, port: number, socketPath: string): string[] {
  return ['bwrap', '--unshare-net', '--dev-bind', '/', '/', '--die-with-parent', '--', ...innerRelayArgs(socat, port, socketPath)]
}

export interface NetHolder {
  process: Subprocess
  /** The pid whose network namespace the sandbox uses (socat), and that namespace's identity. */
  netPid: number
  netns: string
}

/** Whether the holder still holds the namespace it was made with (a dead one's pid may be reused). */
export function holds(holder: NetHolder | undefined): boolean {
  return holder !== undefined && netnsOf(holder.netPid) === holder.netns
}

/** Ready network namespaces with the relay listening, for one gateway address; KEEP spares (see spare-refill.ts). */
export class NetPool {
  /** Two: a lone start leaves one, so its refill waits for a pause; a second start soon after leaves none, so refilling starts at once. */
  static readonly KEEP = 2
  private readonly relay: GatewayRelay
  private readonly spares: NetHolder[] = []
  /** The spare being made, if any: a start that finds none waits for it (it is further along than a new one). */
  private making: Promise<void> | null = null

  constructor(
    relayDir: string,
    private readonly gateway: { host: string; port: number },
    private readonly socat: string,
  ) {
    // Shared by every sandbox of the pool: each namespace's socat (max-children) bounds its own connections.
    this.relay = new GatewayRelay(relayDir, gateway, { maxConnections: Infinity })
  }

  get dir(): string {
    return this.relay.dir
  }

  /** A namespace for a sandbox: a spare still good, else one made now. */
  async take(): Promise<NetHolder> {
    await this.relay.start()
    let holder = this.spare()
    if (!holder && this.making) {
      await this.making
      holder = this.spare()
    }
    holder ??= await this.make()
    refillSpares(`network ${this.dir}`, () => this.fill(), this.spares.length === 0)
    return holder
  }

  private spare(): NetHolder | null {
    for (let holder = this.spares.shift(); holder; holder = this.spares.shift()) {
      if (holds(holder)) return holder
      holder.process.kill('SIGKILL') // died meanwhile
    }
    return null
  }

  private async fill(): Promise<void> {
    while (this.spares.length < NetPool.KEEP) {
      const made = this.make().then((holder) => {
        this.spares.push(holder)
      })
      this.making = made.catch(() => {})
      try {
        await made
      } catch {
        return // the next start makes its own, and says why if that fails too
      } finally {
        this.making = null
      }
    }
  }

  private make(): Promise<NetHolder> {
    return makeNetHolder(this.socat, this.gateway.port, this.relay.socketPath)
  }
}

/** A new network namespace whose relay (socat on its 127.0.0.1:<port>) forwards to the relay socket at `socketPath`. */
export async function makeNetHolder(socat: string, port: number, socketPath: string): Promise<NetHolder> {
  const holder = spawnHelper(netHolderArgs(socat, port, socketPath))
  holder.unref() // it lives as long as its sandbox (or dies with agentd), not a reason to keep running
  const deadline = Date.now() + 5000
  for (;;) {
    const netPid = childOf(holder.pid)
    if (netPid && listening(netPid)) return { process: holder, netPid, netns: netnsOf(netPid) }
    if (holder.exitCode !== null || Date.now() > deadline) {
      holder.kill('SIGKILL')
      const exit = holder.exitCode !== null ? ` (exit ${holder.exitCode})` : ''
      throw new Error(`the sandbox's network (bwrap --unshare-net with the socat relay) did not start${exit}`)
    }
    await Bun.sleep(1)
  }
}

/**
 * Whether the relay listens in `pid`'s fresh namespace: its TCP sockets in use (per namespace, in
 * `net/sockstat`) went from none to one, which happens at listen(2), not at bind(2). Reading
 * `net/tcp` for the listener walks the kernel's whole established-connection table, which the
 * namespaces share: 4 ms of agentd's CPU per read here, polled every ms while socat started, was
 * most of agentd's own CPU per sandbox start. sockstat is 13 us.
 */
function listening(pid: number): boolean {
  const inUse = /^TCP: inuse (\d+)/m.exec(readOr(`/proc/${pid}/net/sockstat`))?.[1]
  return inUse !== undefined && Number(inUse) >= 1
}

function readOr(path: string): string {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return ''
  }
}

function childOf(pid: number): number | null {
  const first = readOr(`/proc/${pid}/task/${pid}/children`).trim().split(/\s+/)[0]
  return first ? Number(first) : null
}

function netnsOf(pid: number): string {
  try {
    return readlinkSync(`/proc/${pid}/ns/net`)
  } catch {
    return ''
  }
}
