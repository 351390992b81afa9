import { closeSync, existsSync, mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { cgroupName, cgroupsAvailable, cgroupWrapArgs, listSandboxCgroups, SandboxCgroup } from './cgroup'
import { diskUsage } from './disk'
import type {
  ExecOptions,
  ParkOptions,
  SandboxDriver,
  SandboxHandle,
  SandboxKind,
  SandboxProcess,
  SandboxSpec,
  SandboxStats,
} from './driver'
import { defaultRunRoot } from './relay'
import { spawnGroup } from './spawn'
import { type Placement, spawnPlaced } from './spawn-in'
import { copyFolder, volumeDiskUsage, VolumeRegistry, type SandboxVolume } from './volume'

export interface HostDriverOptions {
  /**
   * Separates the sandboxes of one agentd (one DATA_DIR) from those of another on the same host:
   * cgroups live under `agentd/<scope>`, runtime files under `<runRoot>/<scope>`, and `sweep`
   * only touches its own scope. At most 32 characters of [A-Za-z0-9_.-].
   */
  scope?: string
  /** Folder for runtime files: relay sockets, runsc state (default `/run/agentd` as root). */
  runRoot?: string
  /** Use cgroups (default: when cgroup v1 freezer, memory and pids, or v2 memory and pids, are writable here). */
  cgroups?: boolean
}

/** What one exec runs on the host: the full argv, its environment and working directory. */
export interface HostCommand {
  argv: string[]
  env: Record<string, string>
  cwd: string
  /** An open file the process gets as its fd 3 (bwrap's options); closed here once it is spawned. */
  fd3?: number
  /** Where it starts: a network namespace, the sandboxes' niceness (see spawn-in.ts). */
  place?: Placement
  /** Runs once the process has exited (e.g. removes its private /tmp). */
  cleanup?: () => void
}

export interface HostSandbox {
  spec: SandboxSpec
  handle: SandboxHandle
  cgroup: SandboxCgroup | null
  /** The sandbox's disk image holding workspace, home and temp (null: files straight on the host's disk). */
  volume: SandboxVolume | null
  procs: Set<SandboxProcess>
  parked: boolean
  /** Driver-specific per-sandbox state (bwrap: its network namespace holder). */
  extra: Record<string, unknown>
}

/**
 * Shared by the `process` and `bwrap` drivers: sandboxes whose processes are host processes in one
 * set of cgroups per sandbox (park = freezer, limits = memory and pids). Neither can keep a process
 * across a restart of agentd: `recover` gives back the workspace, not the processes.
 */
export abstract class HostDriver implements SandboxDriver {
  abstract readonly kind: SandboxKind
  abstract readonly isolatesNetwork: boolean
  readonly canCheckpoint = false
  protected readonly sandboxes = new Map<string, HostSandbox>()
  readonly scope: string
  /** `<runRoot>/<scope>`: this agentd's runtime files. */
  protected readonly runDir: string
  protected readonly useCgroups: boolean
  protected readonly volumes: VolumeRegistry

  constructor(options: HostDriverOptions = {}) {
    this.scope = cgroupName(options.scope ?? 'default').slice(0, 32)
    this.runDir = join(options.runRoot ?? defaultRunRoot(), this.scope)
    this.useCgroups = options.cgroups ?? cgroupsAvailable()
    this.volumes = new VolumeRegistry(join(this.runDir, 'volumes'))
  }

  /** The disk image of a sandbox, or null for a driver whose files go straight to the host's disk. */
  protected volumeOf(_spec: SandboxSpec): SandboxVolume | null {
    return null
  }

  /** Whether processes of this driver's sandboxes are in cgroups (park and limits need them). */
  get enforcesLimits(): boolean {
    return this.useCgroups
  }

  protected get cgroupParent(): string {
    return `agentd/${this.scope}`
  }

  /** The handle's in-sandbox paths and gateway URL. */
  protected abstract describe(spec: SandboxSpec): Pick<SandboxHandle, 'workspace' | 'home' | 'gatewayUrl'>
  /** The host command that runs `argv` in the sandbox (before joining the cgroups). */
  protected abstract command(sandbox: HostSandbox, argv: string[], options: ExecOptions): HostCommand

  /** Driver-specific setup once the cgroups exist (and again on wake, to repair). */
  protected async prepare(_sandbox: HostSandbox): Promise<void> {}

  async create(spec: SandboxSpec): Promise<SandboxHandle> {
    if (this.sandboxes.has(spec.id)) throw new Error(`sandbox ${spec.id} exists already`)
    for (const dir of [spec.hostWorkspace, spec.hostHome, spec.stateDir]) mkdirSync(dir, { recursive: true })
    let cgroup: SandboxCgroup | null = null
    if (this.useCgroups) {
      cgroup = SandboxCgroup.for(this.cgroupParent, spec.id)
      await cgroup.killAll() // leftovers of an earlier server under the same id
      cgroup.create(spec.limits)
    }
    const handle: SandboxHandle = {
      id: spec.id,
      kind: this.kind,
      hostWorkspace: spec.hostWorkspace,
      hostHome: spec.hostHome,
      ...this.describe(spec),
    }
    const sandbox: HostSandbox = { spec, handle, cgroup, volume: this.volumeOf(spec), procs: new Set(), parked: false, extra: {} }
    this.sandboxes.set(spec.id, sandbox)
    try {
      if (sandbox.volume) {
        this.volumes.add(sandbox.volume)
        await sandbox.volume.ensure()
        sandbox.volume.clearTmp() // an earlier server's, after a restart: nothing runs now
      }
      await this.prepare(sandbox)
    } catch (err) {
      await this.destroy(handle)
      throw err
    }
    return handle
  }

  protected sandbox(handle: SandboxHandle): HostSandbox {
    const sandbox = this.sandboxes.get(handle.id)
    if (!sandbox) throw new Error(`sandbox ${handle.id} is not running on this driver (destroyed, or never created)`)
    return sandbox
  }

  exec(handle: SandboxHandle, argv: string[], options: ExecOptions): SandboxProcess {
    const sandbox = this.sandbox(handle)
    const command = this.command(sandbox, argv, options)
    const full = sandbox.cgroup ? cgroupWrapArgs(sandbox.cgroup.joinFiles(), command.argv) : command.argv
    let proc: SandboxProcess
    try {
      const start = (argv: string[]) => spawnGroup(argv, command.env, command.cwd, command.fd3)
      proc = command.place ? spawnPlaced(full, command.place, start) : start(full)
    } finally {
      if (command.fd3 !== undefined) closeSync(command.fd3)
    }
    // Without a freezer, a process started while parked is stopped by signal instead.
    if (!sandbox.cgroup && sandbox.parked) signalGroup(proc.pid, 'SIGSTOP')
    sandbox.procs.add(proc)
    void proc.exited.then(() => {
      sandbox.procs.delete(proc)
      command.cleanup?.()
    })
    return proc
  }

  /** Always a freeze in place: the processes are kept, whatever the options ask. */
  async park(handle: SandboxHandle, _options?: ParkOptions): Promise<void> {
    const sandbox = this.sandbox(handle)
    if (sandbox.cgroup) await sandbox.cgroup.freeze()
    else for (const proc of sandbox.procs) signalGroup(proc.pid, 'SIGSTOP')
    sandbox.parked = true
  }

  async wake(handle: SandboxHandle): Promise<void> {
    const sandbox = this.sandbox(handle)
    if (sandbox.cgroup) sandbox.cgroup.thaw()
    else for (const proc of sandbox.procs) signalGroup(proc.pid, 'SIGCONT')
    sandbox.parked = false
    await sandbox.volume?.ensure()
    await this.prepare(sandbox)
  }

  async destroy(handle: SandboxHandle): Promise<void> {
    const sandbox = this.sandboxes.get(handle.id)
    if (!sandbox) return
    this.sandboxes.delete(handle.id)
    for (const proc of sandbox.procs) {
      proc.kill('SIGKILL')
      if (!sandbox.cgroup) signalGroup(proc.pid, 'SIGCONT') // a stopped process dies only when continued
    }
    await this.release(sandbox)
    await sandbox.cgroup?.remove()
    // Only once every process is gone, so nothing holds the mounts.
    await sandbox.volume?.remove()
    this.volumes.delete(sandbox.spec.id)
    rmSync(sandbox.spec.stateDir, { recursive: true, force: true })
  }

  /** Driver-specific teardown before the cgroups are removed. */
  protected async release(_sandbox: HostSandbox): Promise<void> {}

  /**
   * After a restart: processes of the old server cannot be re-attached (their pipes went with it),
   * so any left in the sandbox's cgroups are killed; the handle is a fresh, running sandbox over
   * the same workspace and home. Null when the workspace is gone.
   */
  async recover(spec: SandboxSpec): Promise<SandboxHandle | null> {
    const existing = this.sandboxes.get(spec.id)
    if (existing) return existing.handle
    if (!existsSync(spec.hostWorkspace)) {
      if (this.useCgroups) await SandboxCgroup.for(this.cgroupParent, spec.id).remove()
      await this.volumeOf(spec)?.remove()
      this.volumes.delete(spec.id)
      return null
    }
    return this.create(spec)
  }

  /**
   * The source's disk, copied while it is parked: its image (frozen while copied), or its two
   * folders. Its processes are host processes, which nothing can copy: the copy has none.
   */
  async copy(source: SandboxHandle, spec: SandboxSpec): Promise<SandboxHandle> {
    const from = this.sandbox(source)
    if (this.sandboxes.has(spec.id) || existsSync(spec.stateDir)) throw new Error(`sandbox ${spec.id} exists already`)
    try {
      mkdirSync(spec.stateDir, { recursive: true })
      const volume = this.volumeOf(spec)
      // Known before anything is copied: a copy a crash cut short is swept at the next start.
      if (volume) this.volumes.add(volume)
      if (from.volume && volume) await from.volume.saveTo(volume.image)
      else {
        await copyFolder(from.spec.hostWorkspace, spec.hostWorkspace)
        await copyFolder(from.spec.hostHome, spec.hostHome)
      }
      const handle = await this.create(spec)
      await this.park(handle)
      return handle
    } catch (err) {
      const made = this.sandboxes.get(spec.id)
      if (made) await this.destroy(made.handle)
      await this.volumeOf(spec)?.remove()
      this.volumes.delete(spec.id)
      for (const dir of [spec.stateDir, spec.hostWorkspace, spec.hostHome]) rmSync(dir, { recursive: true, force: true })
      throw err
    }
  }

  /** The sandbox's disk image, frozen while it is copied (see SandboxVolume.saveTo). */
  async saveDisk(handle: SandboxHandle, dest: string): Promise<void> {
    const volume = this.sandbox(handle).volume
    if (!volume) throw new Error(`a ${this.kind} sandbox has no disk image to save`)
    await volume.saveTo(dest)
  }

  async stats(handle: SandboxHandle): Promise<SandboxStats> {
    const sandbox = this.sandbox(handle)
    const disk = sandbox.volume
      ? volumeDiskUsage(sandbox.volume)
      : diskUsage([sandbox.spec.hostWorkspace, sandbox.spec.hostHome, sandbox.spec.stateDir])
    if (!sandbox.cgroup) return { memoryBytes: 0, processes: sandbox.procs.size, diskBytes: disk, oomKills: 0 }
    return { ...sandbox.cgroup.stats(), diskBytes: disk }
  }

  async sweep(liveIds: string[]): Promise<string[]> {
    const keep = new Set([...liveIds, ...this.sandboxes.keys()].map(cgroupName))
    const removed: string[] = []
    if (this.useCgroups) {
      for (const name of listSandboxCgroups(this.cgroupParent)) {
        if (keep.has(name)) continue
        await new SandboxCgroup(`${this.cgroupParent}/${name}`).remove()
        removed.push(name)
      }
    }
    for (const name of await this.volumes.sweep(keep)) if (!removed.includes(name)) removed.push(name)
    return removed
  }
}

export function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal)
  } catch {
    // the group is gone
  }
}
