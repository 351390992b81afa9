import { readFileSync, writeFileSync, type FSWatcher } from 'node:fs'
import { join } from 'node:path'
import { cgroupName } from '../cgroup'
import type { SandboxHandle, SandboxSpec } from '../driver'
import { containerId, GVISOR_HOME, GVISOR_WORKSPACE } from './spec'
import { GatewayRelay, relayDir } from '../relay'
import type { TailedProcess } from '../tail'
import { volumeMountDir } from '../volume'

export type Status = 'running' | 'parked' | 'paused' | 'stopped' | 'destroyed'

/**
 * How a sandbox is held still in memory: gVisor's own `runsc pause` (the sentry stops its tasks)
 * or the host's cgroup freezer (the sentry, gofer and every thread of theirs stopped from outside).
 */
export type PauseMethod = 'runsc pause' | 'cgroup freezer'

/** One gVisor sandbox as the driver tracks it. */
export interface Gsandbox {
  spec: SandboxSpec
  handle: SandboxHandle
  /** cgroupName(id): the prefix of its container ids. */
  name: string
  /** Each boot or restore makes a new container, `<name>.<generation>`; the old one is deleted in the background. */
  generation: number
  cid: string
  bundle: string
  image: string
  io: string
  relay: GatewayRelay
  innerPort: number
  /**
   * running: container up; parked: checkpoint image, no container; paused: container frozen in
   * memory (a park that could not checkpoint); stopped: no container, no image (files only).
   */
  status: Status
  /** A park or wake is under way: `runsc exec` clients ending now is expected. */
  moving: boolean
  sandboxPid: number | null
  procs: Set<TailedProcess>
  pendingSignals: { proc: TailedProcess; signal: NodeJS.Signals }[]
  /** Taken over from an earlier server as a checkpoint or frozen: the execs it left in it are ended once it runs again. */
  orphans: boolean
  /** Execs of the earlier server that are not orphans: a later `reattach` takes them over. */
  kept: Set<string>
  /** Execs waiting for the sandbox to run (asked for while it was parked). */
  waiting: { proc: TailedProcess; start: () => void }[]
  oomKills: number
  /** Host programs its container mounts an empty file over (host-root.ts), fixed when it was made. */
  masked: string[]
  /** Processes inside when it was frozen: a frozen sentry answers no `runsc ps`. */
  frozenProcesses: number
  /** How it is held still while `paused`: what its wake must undo (park.ts). */
  pausedBy: PauseMethod | null
  lock: Promise<unknown>
  watcher: FSWatcher | null
  monitor: ReturnType<typeof setInterval> | null
}

/** The record of a sandbox (no container yet), its relay under `relayRoot`. */
export function newGsandbox(
  relayRoot: string,
  spec: SandboxSpec,
  innerPort: number,
  generation: number,
  status: Status,
  masked: string[],
): Gsandbox {
  const name = cgroupName(spec.id)
  const handle: SandboxHandle = {
    id: spec.id,
    kind: 'gvisor',
    workspace: GVISOR_WORKSPACE,
    home: GVISOR_HOME,
    hostWorkspace: spec.hostWorkspace,
    hostHome: spec.hostHome,
    gatewayUrl: `http://127.0.0.1:${innerPort}`,
  }
  return {
    spec,
    handle,
    name,
    generation,
    cid: containerId(name, generation),
    bundle: join(spec.stateDir, 'bundle'),
    image: join(spec.stateDir, 'image'),
    // Exec output is written by the sandbox, so it lives on the sandbox's disk image and counts
    // against its disk limit: a flood of output cannot fill the host's disk.
    io: join(volumeMountDir(spec.stateDir), 'io'),
    relay: new GatewayRelay(relayDir(relayRoot, spec.id), spec.gateway, { egress: spec.egress }),
    innerPort,
    status,
    moving: false,
    sandboxPid: null,
    procs: new Set(),
    pendingSignals: [],
    waiting: [],
    orphans: false,
    kept: new Set(),
    oomKills: 0,
    masked,
    frozenProcesses: 0,
    pausedBy: null,
    lock: Promise.resolve(),
    watcher: null,
    monitor: null,
  }
}

/**
 * What the sandbox remembers across restarts (`<stateDir>/sandbox.json`): its relay's port inside,
 * its container generation, and the host programs it was made with masked (a restore must mount
 * what the checkpoint had; a sandbox from before masking has none).
 */
export interface SavedSandbox {
  innerPort?: number
  generation?: number
  masked?: string[]
}

/** Moves the sandbox to a new container id (and its cgroup), remembered across restarts. */
export function nextGeneration(sandbox: Gsandbox): void {
  sandbox.generation += 1
  sandbox.cid = containerId(sandbox.name, sandbox.generation)
  const saved: SavedSandbox = { innerPort: sandbox.innerPort, generation: sandbox.generation, masked: sandbox.masked }
  writeFileSync(join(sandbox.spec.stateDir, 'sandbox.json'), JSON.stringify(saved))
}

/** What an earlier server remembered of the sandbox (nothing when it is lost: the current port, a new generation). */
export function savedSandbox(stateDir: string): SavedSandbox {
  try {
    return JSON.parse(readFileSync(join(stateDir, 'sandbox.json'), 'utf8'))
  } catch {
    return {}
  }
}
