import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { delegateControllers, type SandboxCgroup } from '../cgroup'
import { ParkError } from '../driver'
import { nextGeneration, type Gsandbox, type PauseMethod } from './sandbox'
import { unsavableSockets } from './spec'
import { containerCgroup, retireContainer } from './containers'
import { alive, firstLine, type Runsc } from './runsc'

/**
 * Park and wake of a gVisor sandbox: a checkpoint to its image (the container deleted, no RAM
 * held), or, when a checkpoint cannot save what runs (open connections), a freeze in memory; and
 * the thaw or restore that brings it back, or says it cannot so the driver boots afresh.
 */

/** What parking is given of the driver's setup. */
export interface ParkingSetup {
  /** runsc on the driver's state root. */
  runsc: Runsc
  /** The driver's cgroup scope: its containers' cgroups are `agentd/<scope>/<cid>`. */
  scope: string
  /** Where to report a park without a checkpoint, or a restore that fell back to a fresh start. */
  log: (line: string) => void
  /** Look for open TCP connections before a checkpoint (GvisorOptions.checkOpenConnections). */
  checkOpenConnections: boolean
  /** How a sandbox that cannot be checkpointed is held still (GvisorOptions.pauseBy). */
  pauseBy: PauseMethod
}

/** What parking needs of the driver: the steps of a container's start that a restore shares with a boot, and the execs' cleanup. */
export interface ParkingCallbacks {
  /** Writes the OCI bundle of the sandbox's current container. */
  writeBundle(sandbox: Gsandbox): void
  /** The container is up: watch its output and its host process. */
  running(sandbox: Gsandbox, pidFile: string): void
  /** Kills what execs an earlier server started in the sandbox and never saw end. */
  endOrphans(sandbox: Gsandbox): Promise<void>
}

/** How long a freeze waits, the gateway held, for the bytes already passed to be read inside. */
const RELAY_READ_MS = 1000

export class GvisorParking {
  private readonly runsc: Runsc
  private readonly scope: string
  private readonly log: (line: string) => void
  private readonly checkOpenConnections: boolean
  private readonly pauseBy: PauseMethod

  constructor(
    setup: ParkingSetup,
    private readonly driver: ParkingCallbacks,
  ) {
    this.runsc = setup.runsc
    this.scope = setup.scope
    this.log = setup.log
    this.checkOpenConnections = setup.checkOpenConnections
    this.pauseBy = setup.pauseBy
  }

  /** Parks a running sandbox (a parked, paused or stopped one is left as it is); the caller holds the sandbox's lock. */
  async park(sandbox: Gsandbox, keepProcesses: boolean): Promise<void> {
    if (sandbox.status === 'parked' || sandbox.status === 'paused' || sandbox.status === 'stopped') return
    if (sandbox.status !== 'running') throw new Error(`sandbox ${sandbox.spec.id} is ${sandbox.status}`)
    sandbox.moving = true
    try {
      await this.checkpoint(sandbox, keepProcesses)
    } finally {
      sandbox.moving = false
    }
  }

  /**
   * Brings a paused sandbox back (thawed) or a parked one (restored); false when there is nothing
   * to bring back or the restore failed, so the caller boots afresh. The caller holds the lock,
   * with the sandbox's disk and relay up.
   */
  async wake(sandbox: Gsandbox): Promise<boolean> {
    if (sandbox.status === 'paused') return this.thaw(sandbox)
    return sandbox.status === 'parked' && (await this.restore(sandbox))
  }

  private cgroupOf(cid: string): SandboxCgroup {
    return containerCgroup(this.scope, cid)
  }

  private retire(cid: string): void {
    retireContainer(this.runsc, this.scope, cid)
  }

  /** Checkpoints the sandbox, or freezes it when a checkpoint cannot save it or `keepProcesses` forbids the risk. */
  private async checkpoint(sandbox: Gsandbox, keepProcesses: boolean): Promise<void> {
    const why = keepProcesses ? 'a turn is running, whose processes a failed checkpoint would end' : await this.unsavableNow(sandbox)
    // A failed checkpoint would stop the sandbox and lose its processes: freeze it in memory instead.
    if (why) return this.freeze(sandbox, why)
    rmSync(sandbox.image, { recursive: true, force: true })
    mkdirSync(sandbox.image, { recursive: true })
    const saved = await this.runsc.run(['checkpoint', `--image-path=${sandbox.image}`, sandbox.cid], 300_000)
    if (saved.code !== 0) {
      const state = await this.runsc.state(sandbox.cid)
      if (state?.status === 'running' || state?.status === 'paused') {
        // Something it cannot save appeared after the look (a connection opened meanwhile), and runsc
        // let the sandbox run on: the park freezes it instead, so the session is paused as asked.
        rmSync(sandbox.image, { recursive: true, force: true })
        // Left paused by runsc: resumed first, so that one kind of freeze (and of wake) is ever in use.
        if (state.status === 'paused') await this.runsc.run(['resume', sandbox.cid])
        return this.freeze(sandbox, `the checkpoint failed (${firstLine(saved.stderr)})`)
      }
      this.retire(sandbox.cid)
      rmSync(sandbox.image, { recursive: true, force: true })
      sandbox.status = 'stopped'
      sandbox.sandboxPid = null
      for (const proc of sandbox.procs) proc.finish(137, 'agentd: the sandbox could not be checkpointed and stopped; its files are kept')
      throw new ParkError(
        `checkpoint failed: ${firstLine(saved.stderr)}. The sandbox's processes are lost; its files are kept, and wake starts it afresh`,
        'stopped',
      )
    }
    // The checkpoint stops the container; its memory is free once the sentry has exited. Deleting the
    // stopped container is slow (over a second in runsc) and can happen in the background.
    const sentry = sandbox.sandboxPid
    for (const deadline = Date.now() + 5000; sentry && alive(sentry) && Date.now() < deadline; ) await Bun.sleep(2)
    this.retire(sandbox.cid)
    sandbox.status = 'parked'
    sandbox.sandboxPid = null
  }

  /**
   * Holds the sandbox still in memory, so its processes and connections are kept as they are and
   * nothing inside sees it happen but a jump of the clock. Two ways, each measured on the runsc
   * it is used with (docs/decisions.md): on ptrace (Debian's runsc of 2022) the host's cgroup
   * freezer, because `runsc pause` there now and then lost a wake-up (a CLI waiting for ever on a
   * child that had exited); on systrap (current runsc) `runsc pause`, because the freezer, stopping
   * the sentry's stub threads from outside, now and then lost the turn.
   */
  private async freeze(sandbox: Gsandbox, why: string): Promise<void> {
    // Nothing from the gateway may reach a frozen sandbox, nor wait unread in its socket (see
    // GatewayRelay.hold). A CLI that does not read is frozen all the same (its turn is not lost by that).
    const [drained, processes] = await Promise.all([sandbox.relay.hold(RELAY_READ_MS), this.runsc.processes(sandbox.cid)])
    sandbox.frozenProcesses = processes
    if (!drained) this.log(`agentd: sandbox ${sandbox.spec.id}: frozen with gateway bytes it had not read after ${RELAY_READ_MS} ms`)
    // Either way the state outlives this server: the freezer's in the cgroup, runsc's in its state (see recover).
    try {
      await this.holdStill(sandbox.cid)
    } catch (err) {
      sandbox.relay.release()
      throw new ParkError(`cannot park: ${why}, and freezing it failed: ${(err as Error).message}; the sandbox keeps running`, 'running')
    }
    this.log(`agentd: sandbox ${sandbox.spec.id}: parked without a checkpoint (${why}): frozen, its memory stays held`)
    sandbox.status = 'paused'
    sandbox.pausedBy = this.pauseBy
  }

  private async holdStill(cid: string): Promise<void> {
    if (this.pauseBy === 'cgroup freezer') return this.cgroupOf(cid).freeze()
    const paused = await this.runsc.run(['pause', cid])
    if (paused.code !== 0) throw new Error(`runsc pause: ${firstLine(paused.stderr)}`)
  }

  /** Why a checkpoint would fail now (open connections it cannot save), or null. */
  private async unsavableNow(sandbox: Gsandbox): Promise<string | null> {
    // A host socket held open cannot be saved: no turn runs (see checkpoint), so the relay's connections are ended first.
    if (!(await sandbox.relay.drain(1000))) return 'a process keeps a connection to the model gateway open, which a checkpoint cannot save'
    // Nor can an open TCP connection inside (a listener is fine). Closing ones get a moment.
    for (let attempt = 0; this.checkOpenConnections; attempt++) {
      const tcp = await this.runsc.run(['exec', sandbox.cid, '/bin/cat', '/proc/net/tcp', '/proc/net/tcp6'], 30_000)
      const busy = unsavableSockets(tcp.stdout)
      if (busy.length === 0) return null
      if (attempt >= 10) {
        return `${busy.length} open TCP connection(s) in the sandbox (${busy.slice(0, 3).join(', ')}), which a checkpoint cannot save`
      }
      await Bun.sleep(50)
    }
    return null
  }

  /**
   * Thaws a frozen sandbox and lets the gateway reach it again; false (after logging why) when it
   * is gone meanwhile (its sentry killed), so the caller boots afresh.
   */
  private async thaw(sandbox: Gsandbox): Promise<boolean> {
    if (sandbox.pausedBy === 'runsc pause') {
      const resumed = await this.runsc.run(['resume', sandbox.cid])
      if (resumed.code !== 0) {
        this.log(
          `agentd: sandbox ${sandbox.spec.id}: resume failed (${firstLine(resumed.stderr)}); starting it afresh, its processes are lost`,
        )
        this.retire(sandbox.cid)
        for (const proc of sandbox.procs) proc.finish(137, 'agentd: the paused sandbox could not be resumed; its files are kept')
        sandbox.status = 'stopped'
        sandbox.sandboxPid = null
        sandbox.pausedBy = null
        sandbox.orphans = false
        sandbox.relay.release()
        return false
      }
    } else this.cgroupOf(sandbox.cid).thaw()
    sandbox.status = 'running'
    sandbox.pausedBy = null
    sandbox.relay.release()
    // Frozen by an earlier server: what it left running that is not kept ends now.
    if (sandbox.orphans) await this.driver.endOrphans(sandbox)
    sandbox.orphans = false
    return true
  }

  /** Restores the checkpoint; false (after logging why) when it cannot, so the caller boots afresh. */
  private async restore(sandbox: Gsandbox): Promise<boolean> {
    const pidFile = join(sandbox.spec.stateDir, 'sandbox.pid')
    nextGeneration(sandbox)
    this.driver.writeBundle(sandbox)
    mkdirSync(sandbox.io, { recursive: true })
    delegateControllers(`agentd/${this.scope}`) // cgroup v2 (see the driver's boot)
    const restored = await this.runsc.boot(
      'restore',
      [`--bundle=${sandbox.bundle}`, `--image-path=${sandbox.image}`, `--pid-file=${pidFile}`, sandbox.cid],
      join(sandbox.spec.stateDir, 'runsc.log'),
    )
    if (restored.code === 0) {
      rmSync(sandbox.image, { recursive: true, force: true })
      this.driver.running(sandbox, pidFile)
      // A checkpoint an earlier server took mid-turn brings back that turn's process, whose output
      // nobody reads any more: it ends before anything of this server starts.
      if (sandbox.orphans) await this.driver.endOrphans(sandbox)
      sandbox.orphans = false
      return true
    }
    this.log(
      `agentd: sandbox ${sandbox.spec.id}: restore failed (${firstLine(restored.stderr)}); starting it afresh, its processes are lost`,
    )
    this.retire(sandbox.cid)
    rmSync(sandbox.image, { recursive: true, force: true })
    for (const proc of sandbox.procs) proc.finish(137, 'agentd: the sandbox could not be restored; its files are kept')
    sandbox.status = 'stopped'
    return false
  }
}
