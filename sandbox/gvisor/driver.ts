import { existsSync, mkdirSync, readFileSync, rmSync, symlinkSync, watch, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildSandboxEtc, detectHostRoot, knownMasks, maskedPrograms } from '../host-root'
import { cgroupName, delegateControllers, type SandboxCgroup } from '../cgroup'
import {
  fullLimits,
  type ExecOptions,
  type ParkOptions,
  type RecoverOptions,
  type SandboxDriver,
  type SandboxHandle,
  type SandboxProcess,
  type SandboxSpec,
  type SandboxStats,
} from '../driver'
import { gvisorLayout, gvisorSpec, READY_FILE, sandboxNameOf, type GvisorHost } from './spec'
import type { HostDriverOptions } from '../host-driver'
import { defaultRunRoot, findSocat } from '../relay'
import { alive, firstLine, Runsc, runscBinary } from './runsc'
import { GvisorExecs } from './exec'
import { newGsandbox, nextGeneration, savedSandbox, type Gsandbox, type PauseMethod } from './sandbox'
import { GvisorParking } from './park'
import { copyParked, discardCopy } from './copy'
import { SandboxVolume, volumeDiskUsage, VolumeRegistry } from '../volume'
import { containerCgroup, killSandboxCgroups, retireContainer, sweepGvisor } from './containers'

export { gvisorWorks } from './runsc'

export interface GvisorOptions extends HostDriverOptions {
  /** Where to report what the driver did on its own (a restore that fell back to a fresh start). */
  log?: (line: string) => void
  /**
   * Before a checkpoint, look for open TCP connections in the sandbox (which gVisor cannot save)
   * and freeze it in memory instead when there are some (default true). Off saves a `runsc exec`
   * (about 50 ms) per park; a checkpoint that then fails stops the sandbox, losing its processes.
   */
  checkOpenConnections?: boolean
  /**
   * How a turn is paused where a checkpoint cannot save it (park.ts): by default `runsc pause` on
   * systrap, the host's cgroup freezer on ptrace, each the one that kept every turn there.
   */
  pauseBy?: PauseMethod
}

/**
 * gVisor sandboxes: one long-lived runsc container per sandbox (its own kernel, no network but its
 * loopback with the gateway relay, read-only system, writable workspace and home), each process
 * started by the spawner under its init (exec.ts), output through files so it survives a checkpoint. Park checkpoints to
 * `<stateDir>/image` and deletes the container (no RAM held), or freezes its cgroups when a turn
 * runs or something open cannot be saved (park.ts); wake restores or thaws it. */
export class GvisorDriver implements SandboxDriver {
  readonly kind = 'gvisor' as const
  readonly canCheckpoint = true
  readonly isolatesNetwork = true
  readonly runscInfo = runscBinary()
  readonly scope: string
  private readonly runDir: string
  private readonly runsc: Runsc
  /** What every sandbox's container is made with on the host: its /etc, masked programs, root folders, socat. */
  private readonly host: GvisorHost
  private readonly log: (line: string) => void
  private readonly sandboxes = new Map<string, Gsandbox>()
  private readonly execs: GvisorExecs
  private readonly volumes: VolumeRegistry
  /** Park and wake: checkpoint or freeze, restore or thaw (park.ts). */
  private readonly parking: GvisorParking

  constructor(options: GvisorOptions = {}) {
    this.scope = cgroupName(options.scope ?? 'default').slice(0, 32)
    this.runDir = join(options.runRoot ?? defaultRunRoot(), this.scope)
    this.runsc = new Runsc(join(this.runDir, 'runsc'))
    this.execs = new GvisorExecs(this.runsc, {
      wake: (sandbox) => this.wake(sandbox.handle),
      died: (sandbox) => this.died(sandbox),
    })
    this.volumes = new VolumeRegistry(join(this.runDir, 'volumes'))
    this.log = options.log ?? console.warn
    const socat = findSocat()
    if (!socat) throw new Error('the gvisor driver needs socat for the gateway relay (apt-get install socat)')
    const etcDir = join(this.runDir, 'etc')
    buildSandboxEtc(etcDir)
    const cgroupsPath = (cid: string) => `/agentd/${this.scope}/${cid}`
    this.host = { etcDir, masked: maskedPrograms(this.runDir), rootDirs: detectHostRoot().dirs, socat, cgroupsPath }
    this.parking = new GvisorParking(
      {
        runsc: this.runsc,
        scope: this.scope,
        log: this.log,
        checkOpenConnections: options.checkOpenConnections ?? true,
        pauseBy: options.pauseBy ?? (this.runscInfo?.platform === 'ptrace' ? 'cgroup freezer' : 'runsc pause'),
      },
      {
        writeBundle: (sandbox) => this.writeBundle(sandbox),
        running: (sandbox, pidFile) => this.running(sandbox, pidFile),
        endOrphans: (sandbox) => this.execs.endOrphans(sandbox),
      },
    )
  }

  private get relayRoot(): string {
    return join(this.runDir, 'relay')
  }

  /** The sandbox's disk image: workspace and home (its /tmp is gVisor's tmpfs, under the memory limit). */
  private volume(spec: SandboxSpec): SandboxVolume {
    return new SandboxVolume(spec, fullLimits(spec.limits).diskBytes)
  }

  private cgroupOf(cid: string): SandboxCgroup {
    return containerCgroup(this.scope, cid)
  }

  async create(spec: SandboxSpec): Promise<SandboxHandle> {
    if (this.sandboxes.has(spec.id)) throw new Error(`sandbox ${spec.id} exists already`)
    for (const dir of [spec.hostWorkspace, spec.hostHome, spec.stateDir]) mkdirSync(dir, { recursive: true })
    const sandbox = newGsandbox(this.relayRoot, spec, spec.gateway.port, 0, 'stopped', this.host.masked.paths)
    rmSync(sandbox.image, { recursive: true, force: true })
    rmSync(sandbox.io, { recursive: true, force: true })
    this.sandboxes.set(spec.id, sandbox)
    try {
      const volume = this.volume(spec)
      this.volumes.add(volume)
      await volume.ensure()
      await sandbox.relay.start()
      for (const cid of await this.containersOf(sandbox.name)) this.retire(cid) // leftovers under the same id
      await this.boot(sandbox)
    } catch (err) {
      await this.destroy(sandbox.handle)
      throw err
    }
    return sandbox.handle
  }

  /** Starts a fresh container over the sandbox's files and waits until its gateway relay listens. */
  private async boot(sandbox: Gsandbox): Promise<void> {
    nextGeneration(sandbox)
    mkdirSync(join(sandbox.bundle, 'rootfs'), { recursive: true })
    mkdirSync(sandbox.io, { recursive: true })
    for (const link of detectHostRoot().links) {
      const path = join(sandbox.bundle, 'rootfs', link.path)
      rmSync(path, { force: true })
      symlinkSync(link.target, path) // dangling on the host (relative to the container's root)
    }
    this.writeBundle(sandbox)
    // cgroup v2: runsc makes the container's cgroup; its parent must delegate the controllers.
    delegateControllers(`agentd/${this.scope}`)
    const ready = join(sandbox.io, READY_FILE)
    rmSync(ready, { force: true })
    const pidFile = join(sandbox.spec.stateDir, 'sandbox.pid')
    const run = await this.runsc.boot(
      'run',
      [`--bundle=${sandbox.bundle}`, `--pid-file=${pidFile}`, sandbox.cid],
      join(sandbox.spec.stateDir, 'runsc.log'),
    )
    if (run.code !== 0) {
      this.retire(sandbox.cid)
      throw new Error(`runsc run failed: ${firstLine(run.stderr || run.stdout)}`)
    }
    const deadline = Date.now() + 15_000
    while (!existsSync(ready)) {
      if (Date.now() > deadline) {
        this.retire(sandbox.cid)
        throw new Error('the gVisor sandbox started, but its gateway relay did not come up within 15 s')
      }
      await Bun.sleep(2)
    }
    this.running(sandbox, pidFile)
  }

  private writeBundle(sandbox: Gsandbox): void {
    writeFileSync(join(sandbox.bundle, 'config.json'), JSON.stringify(gvisorSpec(gvisorLayout(this.host, sandbox)), null, 1))
  }

  /** Deletes an old container in the background (see retireContainer). */
  private retire(cid: string): void {
    retireContainer(this.runsc, this.scope, cid)
  }

  /** Ids of the containers in runsc's state that belong to sandbox `name`. */
  private async containersOf(name: string): Promise<string[]> {
    return (await this.runsc.list()).filter((cid) => sandboxNameOf(cid) === name)
  }

  /** The container is up: watch its output folder and its host process. */
  private running(sandbox: Gsandbox, pidFile: string | null): void {
    sandbox.status = 'running'
    if (pidFile) sandbox.sandboxPid = Number.parseInt(readFileSync(pidFile, 'utf8'), 10) || null
    sandbox.watcher ??= watch(sandbox.io, () => {
      for (const proc of sandbox.procs) proc.wake()
    }).unref()
    sandbox.monitor ??= setInterval(() => {
      if (sandbox.status !== 'running' || sandbox.moving) return
      if (sandbox.sandboxPid && !alive(sandbox.sandboxPid)) void this.died(sandbox)
    }, 250).unref()
  }

  /** The container's host process is gone (killed over the memory limit, or from outside). */
  private async died(sandbox: Gsandbox): Promise<void> {
    if (sandbox.status !== 'running') return
    sandbox.status = 'stopped'
    sandbox.sandboxPid = null
    const oom = this.cgroupOf(sandbox.cid).stats().oomKills
    sandbox.oomKills += oom
    const why = oom > 0 ? 'it went over its memory limit' : 'its runsc process ended'
    for (const proc of sandbox.procs) proc.finish(137, `agentd: the sandbox stopped (${why}); its files are kept`)
    this.retire(sandbox.cid)
  }

  private sandbox(handle: SandboxHandle): Gsandbox {
    const sandbox = this.sandboxes.get(handle.id)
    if (!sandbox) throw new Error(`sandbox ${handle.id} is not running on this driver (destroyed, or never created)`)
    return sandbox
  }

  private serial<T>(sandbox: Gsandbox, work: () => Promise<T>): Promise<T> {
    const run = sandbox.lock.then(work, work)
    sandbox.lock = run.catch(() => {})
    return run
  }

  /**
   * Starts `argv` in the sandbox. On a parked sandbox the process starts at the next wake; on one
   * that stopped (it died, or a checkpoint failed) the sandbox is started afresh first.
   */
  exec(handle: SandboxHandle, argv: string[], options: ExecOptions): SandboxProcess {
    return this.execs.exec(this.sandbox(handle), argv, options)
  }

  reattach(handle: SandboxHandle, ref: string): SandboxProcess | null {
    return this.execs.reattach(this.sandbox(handle), ref)
  }

  park(handle: SandboxHandle, options: ParkOptions = {}): Promise<void> {
    const sandbox = this.sandbox(handle)
    return this.serial(sandbox, () => this.parking.park(sandbox, options.keepProcesses === true))
  }

  wake(handle: SandboxHandle): Promise<void> {
    const sandbox = this.sandbox(handle)
    return this.serial(sandbox, async () => {
      if (sandbox.status === 'running') return
      if (sandbox.status === 'destroyed') throw new Error(`sandbox ${handle.id} was destroyed`)
      sandbox.moving = true
      try {
        await this.volume(sandbox.spec).ensure() // mounts lost with a reboot, or never made after a restart
        await sandbox.relay.start()
        // Thawed or restored, else (nothing to bring back, or the restore failed) booted afresh.
        if (!(await this.parking.wake(sandbox))) await this.boot(sandbox)
      } catch (err) {
        for (const { proc } of sandbox.waiting.splice(0)) proc.finish(126, `agentd: the sandbox could not start: ${(err as Error).message}`)
        throw err
      } finally {
        sandbox.moving = false
      }
      // Execs and signals asked for while the sandbox was parked.
      for (const { start } of sandbox.waiting.splice(0)) start()
      for (const { proc, signal } of sandbox.pendingSignals.splice(0)) this.execs.signal(sandbox, proc, signal)
    })
  }

  async destroy(handle: SandboxHandle): Promise<void> {
    const sandbox = this.sandboxes.get(handle.id)
    if (!sandbox) return
    this.sandboxes.delete(handle.id)
    await sandbox.lock
    sandbox.status = 'destroyed'
    sandbox.watcher?.close()
    if (sandbox.monitor) clearInterval(sandbox.monitor)
    // Kill first (the memory is free at once), then let runsc delete its containers in the background.
    await killSandboxCgroups(this.scope, sandbox.name)
    this.retire(sandbox.cid) // earlier generations were retired when they ended

    sandbox.waiting.length = 0
    for (const proc of sandbox.procs) proc.finish(137)
    await sandbox.relay.stop()
    await this.volume(sandbox.spec).remove()
    this.volumes.delete(sandbox.spec.id)
    rmSync(sandbox.spec.stateDir, { recursive: true, force: true })
  }

  /**
   * After a restart: a container still running is taken over as it is (the old server's execs
   * ended, but for `keep`); a checkpoint image makes a parked sandbox; a frozen one is kept frozen
   * when it holds execs to keep (a turn handed over at shutdown), otherwise killed; whatever else is
   * a stopped one that `wake` boots afresh. Null when the workspace is gone.
   */
  async recover(spec: SandboxSpec, options: RecoverOptions = {}): Promise<SandboxHandle | null> {
    const existing = this.sandboxes.get(spec.id)
    if (existing) return existing.handle
    const name = cgroupName(spec.id)
    const containers = await this.containersOf(name)
    if (!existsSync(spec.hostWorkspace)) {
      await killSandboxCgroups(this.scope, name)
      for (const cid of containers) await this.runsc.delete(cid)
      await this.volume(spec).remove()
      this.volumes.delete(spec.id)
      return null
    }
    const volume = this.volume(spec)
    this.volumes.add(volume)
    const saved = savedSandbox(spec.stateDir)
    const generations = containers.map((cid) => Number(cid.slice(name.length + 1)))
    const sandbox = newGsandbox(
      this.relayRoot,
      spec,
      saved.innerPort ?? spec.gateway.port,
      Math.max(saved.generation ?? 0, ...generations),
      'stopped',
      knownMasks(saved.masked),
    )
    this.sandboxes.set(spec.id, sandbox)
    sandbox.kept = new Set(options.keep)
    const cgroup = this.cgroupOf(sandbox.cid)
    // Paused by either way (park.ts); a sentry frozen by its cgroup answers no runsc command, so that is asked first.
    const frozen = cgroup.frozen()
    const current = frozen ? null : await this.runsc.state(sandbox.cid)
    const pausedBy: PauseMethod | null = frozen ? 'cgroup freezer' : current?.status === 'paused' ? 'runsc pause' : null
    if (pausedBy && sandbox.kept.size > 0) {
      // Paused at shutdown with the turn it hands over: it stays so until `wake` resumes it, and
      // only then can the execs that are not kept be ended.
      for (const cid of containers) if (cid !== sandbox.cid) this.retire(cid)
      this.running(sandbox, join(spec.stateDir, 'sandbox.pid'))
      sandbox.status = 'paused'
      sandbox.pausedBy = pausedBy
      sandbox.orphans = true
      await sandbox.relay.start()
      return sandbox.handle
    }
    // Any other paused one (a turn paused when the server stopped) is killed where it stands: that
    // turn is lost, nothing of it runs on; the next wake boots afresh.
    if (pausedBy) await cgroup.killAll()
    const live = current?.status === 'running'
    // A container still running keeps its mounts (one started before sandboxes had disk images
    // keeps its plain folders until it next boots); otherwise they come back before any use.
    if (!live) await volume.ensure()
    mkdirSync(sandbox.io, { recursive: true }) // on the image, so after it is mounted
    for (const cid of containers) if (cid !== sandbox.cid || !live) this.retire(cid)
    if (live) {
      // Still up: taken over as it is, but for the execs of the old server, whose output nobody can read any more.
      rmSync(sandbox.image, { recursive: true, force: true })
      sandbox.sandboxPid = current.pid
      this.running(sandbox, null)
      await this.execs.endOrphans(sandbox)
    } else {
      sandbox.status = existsSync(join(sandbox.image, 'checkpoint.img')) ? 'parked' : 'stopped'
      sandbox.orphans = sandbox.status === 'parked'
    }
    await sandbox.relay.start()
    return sandbox.handle
  }

  /** The source's disk and checkpointed memory (copy.ts), found then as after a restart: parked. */
  async copy(source: SandboxHandle, spec: SandboxSpec): Promise<SandboxHandle> {
    const from = this.sandbox(source)
    if (this.sandboxes.has(spec.id) || existsSync(spec.stateDir)) throw new Error(`sandbox ${spec.id} exists already`)
    const setup = { park: (sandbox: Gsandbox) => this.parking.park(sandbox, false), volume: (of: SandboxSpec) => this.volume(of) }
    try {
      // Known before anything is copied: a copy a crash cut short is swept at the next start.
      this.volumes.add(this.volume(spec))
      await this.serial(from, () => copyParked(from, spec, setup))
      const handle = await this.recover(spec)
      if (!handle) throw new Error('the copy is not on disk')
      return handle
    } catch (err) {
      const made = this.sandboxes.get(spec.id)
      if (made) await this.destroy(made.handle)
      await discardCopy(spec, setup)
      this.volumes.delete(spec.id)
      throw err
    }
  }

  /** Its disk image, frozen while copied (the caller ran `sync` inside: the sentry caches writes). */
  async saveDisk(handle: SandboxHandle, dest: string): Promise<void> {
    await this.volume(this.sandbox(handle).spec).saveTo(dest)
  }

  async stats(handle: SandboxHandle): Promise<SandboxStats> {
    const sandbox = this.sandbox(handle)
    const cgroup = this.cgroupOf(sandbox.cid).stats()
    const up = sandbox.status === 'running' || sandbox.status === 'paused'
    return {
      memoryBytes: up ? cgroup.memoryBytes : 0,
      processes: sandbox.status === 'paused' ? sandbox.frozenProcesses : up ? await this.runsc.processes(sandbox.cid) : 0,
      diskBytes: volumeDiskUsage(this.volume(sandbox.spec)),
      oomKills: sandbox.oomKills + (up ? cgroup.oomKills : 0),
    }
  }

  sweep(liveIds: string[]): Promise<string[]> {
    const keep = [...liveIds, ...this.sandboxes.keys()]
    return sweepGvisor({ runsc: this.runsc, scope: this.scope, relayRoot: this.relayRoot, volumes: this.volumes }, keep)
  }
}
