import { existsSync, readdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { fullLimits, type ExecOptions, type SandboxHandle, type SandboxSpec } from '../driver'
import { HostDriver, type HostCommand, type HostDriverOptions, type HostSandbox } from '../host-driver'
import { buildSandboxEtc, detectHostRoot, type HostRoot, maskedPrograms, type MaskedPrograms } from '../host-root'
import { holds, makeNetHolder, NetPool, type NetHolder } from './netns'
import { bwrapOptionsOnFd } from '../private-file'
import { findSocat, GatewayRelay, listening, RELAY_SOCKET, relayDir } from '../relay'
import { SandboxVolume } from '../volume'

export const BWRAP_WORKSPACE = '/workspace'
export const BWRAP_HOME = '/home/agent'

export interface BwrapLayout {
  hostWorkspace: string
  hostHome: string
  readOnlyPaths: string[]
  /** Host folder bound read-only as /etc (see SANDBOX_ETC). */
  etcDir: string
  root: HostRoot
  /** Host programs bound over by an empty file (host-root.ts). */
  masked: MaskedPrograms
  /** Host folder bound as /tmp (the sandbox disk's, so temp files count against its limit); a fresh tmpfs when absent. */
  tmpDir?: string
}

/**
 * bubblewrap argv for one process: every namespace unshared but the network, which is the
 * sandbox's own (entered with nsenter before bwrap: loopback only, the gateway relay on it); all
 * capabilities dropped; a read-only system (/usr and a few /etc entries); the workspace and home
 * bound read-write; a private /tmp; /proc of its own pid namespace; the environment cleared.
 */
export function bwrapArgs(layout: BwrapLayout, argv: string[], options: ExecOptions): string[] {
  const args = ['bwrap', '--unshare-all', '--share-net', '--die-with-parent', '--new-session', '--cap-drop', 'ALL', '--hostname', 'sandbox']
  args.push('--ro-bind', '/usr', '/usr')
  for (const path of layout.masked.paths) args.push('--ro-bind', layout.masked.file, path)
  for (const link of layout.root.links) args.push('--symlink', link.target, link.path)
  for (const dir of layout.root.dirs) args.push('--ro-bind', dir, dir)
  args.push(
    '--ro-bind',
    layout.etcDir,
    '/etc',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    ...(layout.tmpDir ? ['--bind', layout.tmpDir, '/tmp'] : ['--tmpfs', '/tmp']),
  )
  for (const path of layout.readOnlyPaths) args.push('--ro-bind', path, path)
  args.push('--bind', layout.hostHome, BWRAP_HOME, '--bind', layout.hostWorkspace, BWRAP_WORKSPACE)
  args.push('--chdir', options.cwd ?? BWRAP_WORKSPACE, '--clearenv')
  for (const [key, value] of Object.entries(options.env)) args.push('--setenv', key, value)
  args.push('--', ...argv)
  return args
}

/**
 * bubblewrap sandboxes: one network namespace per sandbox (with the gateway relay, see netns.ts),
 * one bwrap per exec over the sandbox's workspace and home, everything in the sandbox's cgroups. A
 * process lives no longer than its exec (its pid namespace ends with it), so nothing runs between
 * turns and park matters only for a turn in flight.
 */
export class BwrapDriver extends HostDriver {
  readonly kind = 'bwrap' as const
  readonly isolatesNetwork = true
  private readonly root = detectHostRoot()
  private readonly pools = new Map<string, NetPool>()
  private readonly socat: string
  private readonly etcDir: string
  private readonly masked: MaskedPrograms
  private execs = 0

  constructor(options: HostDriverOptions = {}) {
    super(options)
    const socat = findSocat()
    if (!socat) throw new Error('the bwrap driver needs socat for the gateway relay (apt-get install socat)')
    this.socat = socat
    this.etcDir = join(this.runDir, 'etc')
    buildSandboxEtc(this.etcDir)
    this.masked = maskedPrograms(this.runDir)
  }

  protected describe(spec: SandboxSpec): Pick<SandboxHandle, 'workspace' | 'home' | 'gatewayUrl'> {
    return { workspace: BWRAP_WORKSPACE, home: BWRAP_HOME, gatewayUrl: `http://127.0.0.1:${spec.gateway.port}` }
  }

  /** Whether sandboxes get a disk image (mounting one needs root): without, no disk limit. */
  get limitsDisk(): boolean {
    return process.getuid?.() === 0
  }

  /** Workspace, home and /tmp live in a disk image of the sandbox's disk limit. */
  protected volumeOf(spec: SandboxSpec): SandboxVolume | null {
    return this.limitsDisk ? new SandboxVolume(spec, fullLimits(spec.limits).diskBytes) : null
  }

  protected async prepare(sandbox: HostSandbox): Promise<void> {
    const current = sandbox.extra.net as NetHolder | undefined
    if (holds(current)) return
    current?.process.kill('SIGKILL')
    sandbox.extra.net = sandbox.spec.egress ? await this.ownNet(sandbox) : await this.pool(sandbox.spec.gateway).take()
  }

  /**
   * A network namespace whose relay is the sandbox's own, for a sandbox with an egress proxy: the
   * pools' relays are shared by many sandboxes, so they could neither tell whose proxy a request
   * is for nor count one sandbox's connections.
   */
  private async ownNet(sandbox: HostSandbox): Promise<NetHolder> {
    const { spec } = sandbox
    let relay = sandbox.extra.relay as GatewayRelay | undefined
    if (!relay) {
      relay = new GatewayRelay(relayDir(join(this.runDir, 'gateway-relay'), `sandbox ${spec.id}`), spec.gateway, { egress: spec.egress })
      sandbox.extra.relay = relay
    }
    await relay.start()
    return makeNetHolder(this.socat, spec.gateway.port, relay.socketPath)
  }

  /** The pool of network namespaces (and the relay socket) for one gateway address. */
  private pool(gateway: { host: string; port: number }): NetPool {
    const key = `${gateway.host}:${gateway.port}`
    let pool = this.pools.get(key)
    if (!pool) {
      pool = new NetPool(relayDir(join(this.runDir, 'gateway-relay'), `gateway ${key}`), gateway, this.socat)
      this.pools.set(key, pool)
    }
    return pool
  }

  protected async release(sandbox: HostSandbox): Promise<void> {
    ;(sandbox.extra.net as NetHolder | undefined)?.process.kill('SIGKILL')
    await (sandbox.extra.relay as GatewayRelay | undefined)?.stop()
  }

  async sweep(liveIds: string[]): Promise<string[]> {
    const removed = await super.sweep(liveIds)
    // Relay sockets nobody listens on any more (an earlier agentd's).
    const relays = join(this.runDir, 'gateway-relay')
    const mine = new Set([...this.pools.values()].map((pool) => pool.dir))
    for (const name of existsSync(relays) ? readdirSync(relays) : []) {
      const dir = join(relays, name)
      if (!mine.has(dir) && !(await listening(join(dir, RELAY_SOCKET)))) rmSync(dir, { recursive: true, force: true })
    }
    return removed
  }

  protected command(sandbox: HostSandbox, argv: string[], options: ExecOptions): HostCommand {
    const { spec } = sandbox
    const net = sandbox.extra.net as NetHolder | undefined
    // Never run a process in a namespace that is not the sandbox's (a dead holder's pid reused).
    if (!holds(net)) throw new Error(`sandbox ${spec.id} has lost its network namespace; wake it to repair`)
    const layout: BwrapLayout = {
      hostWorkspace: spec.hostWorkspace,
      hostHome: spec.hostHome,
      readOnlyPaths: spec.readOnlyPaths,
      etcDir: this.etcDir,
      root: this.root,
      masked: this.masked,
    }
    const volume = sandbox.volume
    if (volume) layout.tmpDir = volume.execTmp(`${Date.now().toString(36)}-${(this.execs++).toString(36)}`)
    const bwrap = bwrapOptionsOnFd(bwrapArgs(layout, argv, options), spec.stateDir)
    return {
      argv: bwrap.argv,
      // In its network namespace, below agentd in CPU priority whatever it runs (see priority.ts).
      place: { netPid: net!.netPid, netns: net!.netns, niced: true },
      fd3: bwrap.fd,
      env: { PATH: '/usr/bin:/bin:/usr/sbin:/sbin' },
      cwd: spec.hostWorkspace,
      ...(volume && layout.tmpDir ? { cleanup: () => volume.dropExecTmp(layout.tmpDir!) } : {}),
    }
  }
}
