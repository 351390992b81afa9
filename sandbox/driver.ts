import type { Socket } from 'node:net'
import type { RunscBinary } from './gvisor/runsc-binary'

/**
 * The sandbox layer: one interface, one driver per isolation technology. A driver knows nothing of
 * sessions; it starts an isolated place with a workspace, runs processes in it and tears it down.
 */

export type SandboxKind = 'gvisor' | 'bwrap' | 'process'

export interface SandboxSpec {
  /** Unique name, used for host paths and container ids. */
  id: string
  /** Host directory mounted read-write as the workspace. */
  hostWorkspace: string
  /** Host directory mounted read-write as the agent's HOME (CLI state lives here across turns). */
  hostHome: string
  /**
   * Host directory private to the driver for this sandbox: checkpoint images, the container
   * bundle, exec output files. Never visible inside the sandbox; `destroy` removes it. Keep it
   * next to the workspace (e.g. `<DATA_DIR>/sandboxes/<id>/sandbox`) so the sandbox's disk is in
   * one place.
   */
  stateDir: string
  /** Host paths the processes need to read (the harness CLIs), mounted read-only at the same path. */
  readOnlyPaths: string[]
  /**
   * The one TCP service on the host the sandbox may reach (agentd's model gateway). Drivers
   * without network isolation reach it directly; isolated ones forward it into the sandbox.
   */
  gateway: { host: string; port: number }
  /**
   * The sandbox's egress proxy (a Project's `network.allow`, contract section 10): each connection
   * to the gateway's port inside the sandbox that begins with a proxy request (`CONNECT host:port`,
   * `GET http://...`) is handed to it, with the bytes already read in `head`; it then owns the
   * socket. Absent: such a request is answered 403 and the sandbox reaches nothing but the gateway.
   * Isolated drivers only (gvisor, bwrap: each such sandbox gets a relay of its own); `process` has
   * no network isolation and ignores it.
   */
  egress?: (inner: Socket, head: Buffer) => void
  limits: SandboxLimits
  /**
   * A disk image to start the sandbox's disk from (a Project's prebuilt image, saved by
   * `saveDisk`): copied at create, never written. Drivers without disk images ignore it.
   */
  baseImage?: string
}

export interface SandboxLimits {
  /** Memory of everything in the sandbox, in bytes. */
  memoryBytes: number
  /**
   * Number of tasks in the sandbox. On bwrap and process a task is a thread (the kernel's pids
   * controller counts threads; a Bun or Node CLI runs 10-30); on gvisor it bounds the sandbox's
   * host threads (see docs/sandbox.md).
   */
  maxProcesses: number
  /**
   * What the sandbox may write in all (workspace, home and, on bwrap, /tmp): the size of its disk
   * image (see volume.ts). DEFAULT_SANDBOX_LIMITS.diskBytes when absent; `process` has no limit.
   */
  diskBytes?: number
  /** CPU time as a number of cores (cgroup CPU quota). DEFAULT_SANDBOX_LIMITS.cpus when absent. */
  cpus?: number
}

/**
 * Limits used when the operator sets none (AGENTD_SANDBOX_MEMORY_MB, AGENTD_SANDBOX_PROCESSES,
 * AGENTD_SANDBOX_DISK_MB, AGENTD_SANDBOX_CPUS).
 */
export const DEFAULT_SANDBOX_LIMITS: Required<SandboxLimits> = {
  memoryBytes: 2048 * 1024 * 1024,
  maxProcesses: 512,
  diskBytes: 10240 * 1024 * 1024,
  cpus: 2,
}

/** `limits` with every absent field at its default. */
export function fullLimits(limits: SandboxLimits): Required<SandboxLimits> {
  return {
    memoryBytes: limits.memoryBytes,
    maxProcesses: limits.maxProcesses,
    diskBytes: limits.diskBytes ?? DEFAULT_SANDBOX_LIMITS.diskBytes,
    cpus: limits.cpus ?? DEFAULT_SANDBOX_LIMITS.cpus,
  }
}

export interface SandboxStats {
  /** Resident memory held on the host right now (0 for a checkpointed sandbox). */
  memoryBytes: number
  processes: number
  diskBytes: number
  /**
   * Processes killed for going over the memory limit since the sandbox was created (gvisor: the
   * number of times the whole sandbox was). A turn that exits by SIGKILL (137) while this went
   * up was killed by the memory limit.
   */
  oomKills: number
}

export interface SandboxHandle {
  readonly id: string
  readonly kind: SandboxKind
  /** The workspace and home as processes inside the sandbox see them. */
  readonly workspace: string
  readonly home: string
  readonly hostWorkspace: string
  readonly hostHome: string
  /** Base URL of the gateway as processes inside the sandbox reach it. */
  readonly gatewayUrl: string
}

export interface ExecOptions {
  env: Record<string, string>
  /** Working directory inside the sandbox; the workspace when omitted. */
  cwd?: string
}

export interface SandboxProcess {
  /**
   * A host pid, for logs only: the process group leader on bwrap and process; on gvisor the
   * `runsc exec` client (0 until it started), whose death does not end the process. Never kill it
   * directly: use `kill`, or `recover`/`sweep` after a restart.
   */
  readonly pid: number
  readonly stdout: ReadableStream<Uint8Array>
  readonly stderr: ReadableStream<Uint8Array>
  readonly exited: Promise<number>
  /** Signals the process and everything it started (its process group); SIGKILL by default. */
  kill(signal?: NodeJS.Signals): void
  /**
   * What a later agentd takes this process over by (`reattach`), on drivers whose processes
   * outlive agentd (gvisor: the exec's name); absent elsewhere.
   */
  readonly ref?: string
}

export interface ParkOptions {
  /**
   * The processes must survive the park (a turn is running): gvisor then freezes the sandbox in
   * memory instead of checkpointing it, since runsc's checkpoint cannot save every open file or
   * connection, and one that fails ends the processes.
   */
  keepProcesses?: boolean
}

export interface RecoverOptions {
  /**
   * Processes of the earlier server to keep (their `SandboxProcess.ref`), to `reattach` to: a
   * sandbox frozen with them stays frozen (`wake` thaws it) and they are not ended as orphans.
   * Drivers that cannot keep processes ignore it.
   */
  keep?: string[]
}

export interface SandboxDriver {
  readonly kind: SandboxKind
  /**
   * Parking saves the processes themselves (a checkpoint): a parked sandbox holds none, they
   * outlive a restart of agentd, and nothing is frozen in place to kill. False where park freezes
   * host processes, which die with agentd and must be thawed before a kill takes effect.
   */
  readonly canCheckpoint: boolean
  /**
   * The sandbox has no network of its own: the gateway relay is its one way out, and the egress
   * proxy behind it the one way to the internet. False where processes share the host's network.
   */
  readonly isolatesNetwork: boolean
  /** The runsc it runs (its path, version, platform): gvisor only. */
  readonly runscInfo?: RunscBinary | null
  /** Prepares the sandbox; afterwards `exec` starts processes in it. */
  create(spec: SandboxSpec): Promise<SandboxHandle>
  /**
   * Starts one process with stdout and stderr streamed back. On a parked sandbox it starts at the
   * next `wake` (its streams stall until then); on a gvisor sandbox that stopped (it went over its
   * memory limit) the sandbox is started afresh first. Throws only for an unknown (destroyed) handle.
   */
  exec(handle: SandboxHandle, argv: string[], options: ExecOptions): SandboxProcess
  /**
   * Parks the sandbox: its processes stop where they are and use no CPU (gvisor: checkpointed to
   * disk, no RAM held). Disk is kept. Running `exec` streams stall and resume after `wake`, with
   * nothing lost. Idempotent. gvisor: an open TCP connection inside cannot be checkpointed, so such
   * a sandbox is frozen in memory instead (logged), as is one whose processes must be kept
   * (`keepProcesses`); a checkpoint that fails throws `ParkError`.
   */
  park(handle: SandboxHandle, options?: ParkOptions): Promise<void>
  /**
   * Wakes a parked sandbox; its processes continue where they stopped. Idempotent (a no-op on a
   * running sandbox), so call it before every turn: on gvisor it also starts afresh a sandbox that
   * stopped, or whose checkpoint could not be restored (logged).
   */
  wake(handle: SandboxHandle): Promise<void>
  /** Kills everything in the sandbox and removes it; the host workspace is left to the caller. */
  destroy(handle: SandboxHandle): Promise<void>
  /**
   * After a server restart: the handle of this sandbox if its workspace still exists, null when it
   * is gone. bwrap and process cannot keep processes across a restart: anything left is killed and
   * the sandbox is fresh. gvisor keeps them: a running container is taken over as it is, a
   * checkpoint is restored by the next `wake`. Either way, `wake` before the next exec.
   */
  recover(spec: SandboxSpec, options?: RecoverOptions): Promise<SandboxHandle | null>
  /**
   * After a restart, on a sandbox `recover` kept `ref` in: the process an earlier server started
   * (its `SandboxProcess.ref`), its output streamed again from its first byte. Null when it is not
   * there. Only drivers whose processes outlive agentd have it.
   */
  reattach?(handle: SandboxHandle, ref: string): SandboxProcess | null
  stats(handle: SandboxHandle): Promise<SandboxStats>
  /**
   * Copies the sandbox's disk, as it is now, to the image file `dest` (a Project's prebuilt image,
   * for `SandboxSpec.baseImage`); the sandbox goes on running. Run `sync` in the sandbox first:
   * gVisor's sentry holds written data in its cache until then. Absent on drivers without disk images.
   */
  saveDisk?(handle: SandboxHandle, dest: string): Promise<void>
  /**
   * A new sandbox `spec` made from the parked sandbox `source` as it is now: its disk copied (on
   * gvisor with its checkpointed memory too, so what ran in it goes on from the same point at the
   * copy's first wake; host drivers cannot copy processes, the copy has none). The copy is parked
   * (`wake` before its first exec) and shares nothing with the source, which is left as it was.
   * Throws `NotCopyable` when the source's state cannot be copied as it is.
   */
  copy(source: SandboxHandle, spec: SandboxSpec): Promise<SandboxHandle>
  /**
   * After a restart, before `recover`: kills and removes what this driver left running for
   * sandboxes not in `liveIds` (processes, cgroups, containers, relay sockets), within this
   * agentd's scope. Folders under DATA_DIR are the caller's. Returns the ids it removed.
   */
  sweep(liveIds: string[]): Promise<string[]>
}

/**
 * A park that did not happen. `sandbox` says what became of the sandbox: still `running` (nothing
 * was touched), or `stopped` (the checkpoint failed and took the processes with it; the files are
 * kept and `wake` starts the sandbox afresh).
 */
export class ParkError extends Error {
  constructor(
    message: string,
    readonly sandbox: 'running' | 'stopped',
  ) {
    super(message)
    this.name = 'ParkError'
  }
}

/** A sandbox whose state cannot be copied as it is (`SandboxDriver.copy`); the message says why. */
export class NotCopyable extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'NotCopyable'
  }
}
