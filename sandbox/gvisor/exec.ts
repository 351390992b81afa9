import { rmSync } from 'node:fs'
import { constants } from 'node:os'
import { join } from 'node:path'
import type { ExecOptions, SandboxProcess } from '../driver'
import type { Gsandbox } from './sandbox'
import { gvisorExecArgs, gvisorExecProcess, gvisorKillArgs, READY_FILE } from './spec'
import { HostDir } from '../host-fs'
import { writePrivateFile } from '../private-file'
import { alive, firstLine, type Runsc } from './runsc'
import { runHelper, spawnHelper } from '../spawn'
import { TailedProcess } from '../tail'

/**
 * The gVisor driver's processes: each started by the sandbox's spawner (a `runsc exec` hands over
 * its request: SPAWN_REQUEST in spec.ts), its output tailed from files (TailedProcess) so it
 * survives a checkpoint; signals to its process group; execs and signals asked for while the
 * sandbox is parked, held until it wakes.
 */

/** What the exec side needs of the driver. */
export interface ExecHost {
  wake(sandbox: Gsandbox): Promise<void>
  died(sandbox: Gsandbox): Promise<void>
}

export class GvisorExecs {
  private seq = 0

  constructor(
    private readonly runsc: Runsc,
    private readonly driver: ExecHost,
  ) {}

  /**
   * Starts `argv` in the sandbox. On a parked sandbox the process starts at the next wake; on one
   * that stopped (it died, or a checkpoint failed) the sandbox is started afresh first.
   */
  exec(sandbox: Gsandbox, argv: string[], options: ExecOptions): SandboxProcess {
    const name = `${Date.now().toString(36)}-${(this.seq++).toString(36)}`
    const proc: TailedProcess = new TailedProcess(join(sandbox.io, name), (signal) => this.signal(sandbox, proc, signal))
    sandbox.procs.add(proc)
    void proc.exited.then(() => sandbox.procs.delete(proc))
    const start = () => this.start(sandbox, proc, name, argv, options)
    if (sandbox.status === 'running' && !sandbox.moving) start()
    else {
      sandbox.waiting.push({ proc, start })
      if (sandbox.status === 'stopped' && !sandbox.moving) {
        this.driver.wake(sandbox).catch((err) => proc.finish(126, `agentd: the sandbox could not start: ${(err as Error).message}`))
      }
    }
    return proc
  }

  /**
   * The exec `ref` an earlier server started and handed over (RecoverOptions.keep): its output
   * files are read again from their start. Null when it left no pid file (it never started).
   */
  reattach(sandbox: Gsandbox, ref: string): SandboxProcess | null {
    // A name this driver made (see exec): never a path.
    if (!/^[a-z0-9]+-[a-z0-9]+$/.test(ref) || !sandbox.kept.has(ref) || [...sandbox.procs].some((p) => p.ref === ref)) return null
    const proc: TailedProcess = new TailedProcess(join(sandbox.io, ref), (signal) => this.signal(sandbox, proc, signal))
    if (proc.groupId() === null && proc.exitCode() === null) {
      proc.finish(1)
      sandbox.kept.delete(ref)
      return null
    }
    // Kept (out of endOrphans' reach, which runs at the thaw) for as long as it runs.
    sandbox.procs.add(proc)
    void proc.exited.then(() => {
      sandbox.procs.delete(proc)
      sandbox.kept.delete(ref)
    })
    return proc
  }

  private start(sandbox: Gsandbox, proc: TailedProcess, name: string, argv: string[], options: ExecOptions): void {
    if (proc.finished) return
    // The process (its environment holds the turn's gateway token) goes to runsc in a file only
    // root can read, in the sandbox's host-only state folder: never in a host process's argv.
    const processFile = writePrivateFile(sandbox.spec.stateDir, `${name}.json`, JSON.stringify(gvisorExecProcess(name, argv, options)))
    const client = spawnHelper(gvisorExecArgs(this.runsc.root, sandbox.cid, processFile), { output: 'pipe' })
    proc.pid = client.pid
    // runsc has read it once the process runs (its wrapper wrote the pid) or the client ended.
    void (async () => {
      while (!proc.finished && proc.groupId() === null && client.exitCode === null) await Bun.sleep(20)
      rmSync(processFile, { force: true })
    })()
    const clientErr = new Response(client.stderr).text()
    void new Response(client.stdout).text()
    void client.exited.then(async (code) => {
      // The client also ends when the container is checkpointed; the process goes on after a wake.
      const duringRun = sandbox.status === 'running' && !sandbox.moving
      await Bun.sleep(100)
      if (proc.finished || !duringRun || sandbox.status !== 'running') return
      if (sandbox.sandboxPid && !alive(sandbox.sandboxPid)) return void this.driver.died(sandbox)
      // Never started (a bad cwd, a missing binary of runsc's own): no pid file, a failing client.
      if (proc.groupId() === null && proc.exitCode() === null && code !== 0)
        proc.finish(code || 126, `agentd: runsc exec failed: ${firstLine(await clientErr)}`)
    })
  }

  signal(sandbox: Gsandbox, proc: TailedProcess, signal: NodeJS.Signals): void {
    const waiting = sandbox.waiting.findIndex((w) => w.proc === proc)
    if (waiting >= 0) {
      // Not started yet: it never will.
      sandbox.waiting.splice(waiting, 1)
      return proc.finish(128 + (constants.signals[signal] ?? 9))
    }
    if (sandbox.status === 'parked' || sandbox.status === 'paused' || sandbox.moving) {
      sandbox.pendingSignals.push({ proc, signal })
      return
    }
    if (sandbox.status !== 'running') return
    void (async () => {
      for (let tries = 0; tries < 100 && !proc.finished; tries++) {
        const group = proc.groupId()
        if (group) return void (await runHelper(gvisorKillArgs(this.runsc.root, sandbox.cid, group, signal)))
        await Bun.sleep(20)
      }
    })()
  }

  /**
   * Kills the process groups of execs an earlier server started and never saw end; removes their
   * files. Execs kept for a `reattach` (Gsandbox.kept) are left alone.
   */
  async endOrphans(sandbox: Gsandbox): Promise<void> {
    // The io folder is the sandbox's to write: its entries are read without following links or
    // blocking on a FIFO, and unlinked (a folder planted there stays, harmlessly).
    const io = HostDir.open(sandbox.io)
    if (!io) return
    try {
      for (const entry of io.entries()) {
        const prefix = entry.name.replace(/\.[a-z]+$/, '')
        if (!entry.name.endsWith('.pid') || sandbox.kept.has(prefix) || io.read(`${prefix}.exit`, 0) !== null) continue
        const group = Number.parseInt(new TextDecoder().decode(io.read(entry.name, 64) ?? new Uint8Array()), 10)
        if (group > 0) await runHelper(gvisorKillArgs(this.runsc.root, sandbox.cid, group, 'SIGKILL'))
      }
      for (const entry of io.entries()) {
        if (entry.name !== READY_FILE && !sandbox.kept.has(entry.name.replace(/\.[a-z]+$/, ''))) io.remove(entry.name)
      }
    } finally {
      io.close()
    }
  }
}
