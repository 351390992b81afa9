import { existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fullLimits, type SandboxLimits } from './driver'

/**
 * One sandbox's cgroups, on cgroup v1 (freezer, memory, pids and, when mounted, cpu hierarchies)
 * or v2 (one directory of the unified hierarchy), whichever the host mounts: every process of the
 * sandbox is in them from its first instruction (see `cgroupWrapArgs`), so park freezes all of
 * them, forks and setsid children included, the limits cover all of them, and destroy finds them
 * all.
 */

export const CGROUP_ROOT = '/sys/fs/cgroup'
export type CgroupVersion = 'v1' | 'v2'

/** v1 hierarchies, in joining order: the freezer last, so a process started while parked is fully placed before it stops. */
const V1_REQUIRED = ['pids', 'memory', 'freezer'] as const
/** v1 hierarchies used when mounted: the CPU quota is a limit, not a condition for isolation. */
const V1_OPTIONAL = ['cpu'] as const
/** v2 controllers the sandbox cgroups need enabled (cpu only when the host offers it). */
const V2_REQUIRED = ['memory', 'pids'] as const
/** The CPU quota's period (the kernel's default): a sandbox gets `cpus × period` of CPU time per period. */
export const CPU_PERIOD_US = 100_000

/** Which cgroup hierarchy this host mounts at `root`, or null when neither is usable. */
export function cgroupVersion(root = CGROUP_ROOT): CgroupVersion | null {
  const controllers = readText(join(root, 'cgroup.controllers'))
  if (controllers !== null) {
    const offered = controllers.split(/\s+/)
    return V2_REQUIRED.every((c) => offered.includes(c)) ? 'v2' : null
  }
  return V1_REQUIRED.every((c) => existsSync(join(root, c, 'cgroup.procs'))) ? 'v1' : null
}

/** Whether agentd can make sandbox cgroups here (root, and a v1 or v2 hierarchy with what they need). */
export function cgroupsAvailable(root = CGROUP_ROOT): boolean {
  if (process.getuid?.() !== 0) return false
  return cgroupVersion(root) !== null
}

/** Cgroup directory names are restricted to a safe alphabet (no leading dot); anything else is replaced. */
export function cgroupName(id: string): string {
  return id.replace(/[^A-Za-z0-9_.-]/g, '_').replace(/^\.+/, (dots) => '_'.repeat(dots.length)) || '_'
}

/**
 * The files a new process writes itself into to join a sandbox's cgroups, in joining order, and
 * what it writes. v1: `0` into each hierarchy's `tasks`, which moves the writing thread alone (the
 * wrapper `sh` has one). The kernel skips its global threadgroup lock for that case, and taking
 * that lock after a quiet moment costs an RCU grace period, 5-15 ms on a small machine: a first
 * exec in a new sandbox paid it on every create. v2 has no such file for a whole process: its pid
 * into `cgroup.procs`.
 */
export interface CgroupJoin {
  files: string[]
  writes: 'own thread' | 'own pid'
}

/**
 * argv that joins the cgroups (`join`, in order) and then execs `argv`: a `sh` that writes itself
 * into each file and replaces itself with the command, so the command and everything it starts
 * is inside from its first instruction. On v1 the freezer goes last, so a process started while
 * the sandbox is parked is fully placed before it stops.
 */
export function cgroupWrapArgs(join: CgroupJoin, argv: string[]): string[] {
  const self = join.writes === 'own thread' ? '0' : '$$'
  const script = `n=$1; shift; while [ "$n" -gt 0 ]; do echo ${self} > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"`
  return ['/bin/sh', '-c', script, 'agentd-cgroup', String(join.files.length), ...join.files, ...argv]
}

export interface CgroupStats {
  /** Anonymous memory and tmpfs of the sandbox's processes (`rss + shmem`, v2 `anon + shmem`, of memory.stat). */
  memoryBytes: number
  processes: number
  /** Processes the kernel killed for going over the memory limit, since the cgroup was made. */
  oomKills: number
}

/**
 * The directory operations the kernel gives cgroupfs a meaning for. Only `rmdir` differs from a
 * plain folder (it removes a cgroup with its interface files, and refuses one with processes), so
 * a test on a fake tree can stand in for it.
 */
export interface CgroupFs {
  rmdir(path: string): void
}

const KERNEL_FS: CgroupFs = { rmdir: (path) => rmdirSync(path) }

export class SandboxCgroup {
  readonly version: CgroupVersion

  constructor(
    /** `<parent>/<name>` below the hierarchy, e.g. `agentd/<scope>/<sandbox id>`. */
    readonly path: string,
    private readonly root = CGROUP_ROOT,
    version?: CgroupVersion,
    private readonly fs: CgroupFs = KERNEL_FS,
  ) {
    this.version = version ?? cgroupVersion(root) ?? 'v1'
  }

  static for(parent: string, id: string, root = CGROUP_ROOT, version?: CgroupVersion, fs?: CgroupFs): SandboxCgroup {
    return new SandboxCgroup(`${parent}/${cgroupName(id)}`, root, version, fs)
  }

  /** v1: the hierarchies mounted here, in joining order. */
  private v1Controllers(): string[] {
    return [...V1_REQUIRED.slice(0, 2), ...V1_OPTIONAL.filter((c) => existsSync(join(this.root, c, 'cgroup.procs'))), 'freezer']
  }

  /** The directories of this cgroup: one per v1 hierarchy, or the one of v2. */
  private dirs(): string[] {
    return this.version === 'v2' ? [join(this.root, this.path)] : this.v1Controllers().map((c) => join(this.root, c, this.path))
  }

  /** The directory holding `controller`'s files (v2: the one directory). */
  private dir(controller: string): string {
    return this.version === 'v2' ? join(this.root, this.path) : join(this.root, controller, this.path)
  }

  /** The `cgroup.procs` files: every process in the cgroups. */
  procsFiles(): string[] {
    return this.dirs().map((dir) => join(dir, 'cgroup.procs'))
  }

  /** How a new process joins (see CgroupJoin). */
  joinFiles(): CgroupJoin {
    if (this.version === 'v2') return { files: this.procsFiles(), writes: 'own pid' }
    return { files: this.dirs().map((dir) => join(dir, 'tasks')), writes: 'own thread' }
  }

  exists(): boolean {
    return existsSync(this.dir('freezer'))
  }

  /** Creates the cgroups (or reuses them) and applies the limits. */
  create(sandboxLimits: SandboxLimits): void {
    const limits = fullLimits(sandboxLimits)
    const quota = String(Math.max(1000, Math.round(limits.cpus * CPU_PERIOD_US)))
    if (this.version === 'v2') {
      const cpu = this.enableControllers()
      const dir = this.dir('')
      mkdirSync(dir, { recursive: true })
      writeFileSync(join(dir, 'memory.max'), String(limits.memoryBytes))
      // v2 counts swap apart from memory: none at all, so the limit cannot be escaped into swap.
      writeFileSync(join(dir, 'memory.swap.max'), '0')
      writeFileSync(join(dir, 'pids.max'), String(limits.maxProcesses))
      if (cpu) writeFileSync(join(dir, 'cpu.max'), `${quota} ${CPU_PERIOD_US}`)
      this.thaw()
      return
    }
    for (const dir of this.dirs()) mkdirSync(dir, { recursive: true })
    writeFileSync(join(this.dir('pids'), 'pids.max'), String(limits.maxProcesses))
    const memory = this.dir('memory')
    writeFileSync(join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes))
    // With swap accounting, the same limit on memory+swap, so the limit cannot be escaped into swap.
    const memsw = join(memory, 'memory.memsw.limit_in_bytes')
    if (existsSync(memsw)) writeFileSync(memsw, String(limits.memoryBytes))
    if (this.v1Controllers().includes('cpu')) {
      writeFileSync(join(this.dir('cpu'), 'cpu.cfs_period_us'), String(CPU_PERIOD_US))
      writeFileSync(join(this.dir('cpu'), 'cpu.cfs_quota_us'), quota)
    }
    this.thaw()
  }

  /** v2: delegates the controllers down to this cgroup's parent; whether cpu is among them. */
  private enableControllers(): boolean {
    return delegateControllers(dirname(this.path), this.root)
  }

  pids(): number[] {
    const seen = new Set<number>()
    for (const file of this.procsFiles()) {
      for (const line of readLines(file)) seen.add(Number(line))
    }
    // A pid without /proc entry is fully gone (reaped); the kernel drops it from the cgroup too.
    return [...seen].filter((pid) => pid > 0 && existsSync(`/proc/${pid}`))
  }

  /**
   * Freezes every process; resolves once the kernel reports them all stopped. v1's freezer asks each
   * task once, and a task it missed (one forked meanwhile, or a ptrace tracee whose tracer froze
   * first: gVisor's stubs) leaves the cgroup FREEZING for good; the kernel's documentation says to
   * retry by writing FROZEN again, which runc does too. So it is written on every look: with one
   * write, 18 of 20 cgroups running `strace -f` on a forking loop were still FREEZING after 5 s
   * here, with the rewrites none (test/sandbox/cgroup-freeze.test.ts). v2 has no such gap.
   */
  async freeze(timeoutMs = 15_000): Promise<void> {
    const deadline = Date.now() + timeoutMs
    const ask = () =>
      this.version === 'v2'
        ? writeFileSync(join(this.dir(''), 'cgroup.freeze'), '1')
        : writeFileSync(join(this.dir('freezer'), 'freezer.state'), 'FROZEN')
    ask()
    while (!this.settledFrozen()) {
      if (Date.now() > deadline) {
        this.thaw()
        throw new Error(`the sandbox's processes did not freeze within ${timeoutMs} ms`)
      }
      await Bun.sleep(2)
      if (this.version === 'v1') ask()
    }
  }

  /** Whether the kernel reports every process stopped (not only asked to). */
  private settledFrozen(): boolean {
    if (this.version === 'v2') return keyValues(readLines(join(this.dir(''), 'cgroup.events'))).frozen === 1
    return readText(join(this.dir('freezer'), 'freezer.state'))?.trim() === 'FROZEN'
  }

  thaw(): void {
    if (this.version === 'v2') {
      const dir = this.dir('')
      if (existsSync(dir)) writeFileSync(join(dir, 'cgroup.freeze'), '0')
      return
    }
    const state = join(this.dir('freezer'), 'freezer.state')
    if (existsSync(state)) writeFileSync(state, 'THAWED')
  }

  frozen(): boolean {
    if (this.version === 'v2') return readText(join(this.dir(''), 'cgroup.freeze'))?.trim() === '1'
    const state = readText(join(this.dir('freezer'), 'freezer.state'))
    return state !== null && state.trim() !== 'THAWED'
  }

  /**
   * Kills every process in the cgroups: frozen first so nothing forks in between, then SIGKILL to
   * all, then thawed so the signals are delivered; repeated until the cgroups are empty. On v2 with
   * cgroup.kill (Linux 5.14+) the kernel kills them all at once, forks included, with no freeze.
   */
  async killAll(timeoutMs = 5000): Promise<void> {
    if (!this.exists()) return
    const deadline = Date.now() + timeoutMs
    const kill = this.version === 'v2' ? join(this.dir(''), 'cgroup.kill') : null
    for (;;) {
      const pids = this.pids()
      if (pids.length === 0) return
      if (Date.now() > deadline) throw new Error(`processes ${pids.join(', ')} of cgroup ${this.path} did not die`)
      if (kill && existsSync(kill)) writeFileSync(kill, '1')
      else await this.freeze(1000).catch(() => {})
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL')
        } catch {
          // already gone
        }
      }
      this.thaw()
      await Bun.sleep(5)
    }
  }

  /** Kills everything left and removes the cgroups. */
  async remove(): Promise<void> {
    await this.killAll()
    for (const dir of this.dirs()) {
      for (let attempt = 0; existsSync(dir); attempt++) {
        try {
          this.fs.rmdir(dir)
        } catch (err) {
          // EBUSY while the last killed task is still being reaped.
          if (attempt > 200) throw err
          await Bun.sleep(5)
        }
      }
    }
  }

  stats(): CgroupStats {
    if (!this.exists()) return { memoryBytes: 0, processes: 0, oomKills: 0 }
    const memory = this.dir('memory')
    const stat = keyValues(readLines(join(memory, 'memory.stat')))
    if (this.version === 'v2') {
      const events = keyValues(readLines(join(memory, 'memory.events')))
      return { memoryBytes: (stat.anon ?? 0) + (stat.shmem ?? 0), processes: this.pids().length, oomKills: events.oom_kill ?? 0 }
    }
    const oom = keyValues(readLines(join(memory, 'memory.oom_control')))
    return {
      memoryBytes: (stat.total_rss ?? stat.rss ?? 0) + (stat.total_shmem ?? stat.shmem ?? 0),
      processes: this.pids().length,
      oomKills: oom.oom_kill ?? 0,
    }
  }
}

/**
 * cgroup v2: a controller works in a cgroup only when every ancestor delegates it
 * (cgroup.subtree_control), from the root down. Makes `parent` (e.g. `agentd/<scope>`) and
 * delegates memory, pids and, when offered, cpu to its children: the sandbox cgroups agentd or
 * runsc make there. Returns whether cpu is delegated (it is optional). A no-op on v1.
 */
export function delegateControllers(parent: string, root = CGROUP_ROOT): boolean {
  if (cgroupVersion(root) !== 'v2') return false
  const offered = (readText(join(root, 'cgroup.controllers')) ?? '').split(/\s+/)
  const wanted: string[] = [...V2_REQUIRED, ...(offered.includes('cpu') ? ['cpu'] : [])]
  const ancestors = [root]
  for (let dir = join(root, parent); dir.length > root.length; dir = dirname(dir)) ancestors.splice(1, 0, dir)
  let cpu = wanted.includes('cpu')
  for (const dir of ancestors) {
    mkdirSync(dir, { recursive: true })
    const control = join(dir, 'cgroup.subtree_control')
    const enabled = (readText(control) ?? '').split(/\s+/)
    const missing = wanted.filter((c) => (c !== 'cpu' || cpu) && !enabled.includes(c))
    if (missing.length === 0) continue
    // One write enables them all or none (the kernel's rule).
    try {
      writeFileSync(control, missing.map((c) => `+${c}`).join(' '))
    } catch (err) {
      if (!missing.includes('cpu')) throw err
      cpu = false // e.g. a realtime process in the root cgroup keeps cpu from being delegated
      const rest = missing.filter((c) => c !== 'cpu')
      if (rest.length > 0) writeFileSync(control, rest.map((c) => `+${c}`).join(' '))
    }
  }
  return cpu
}

/** Names of the sandbox cgroups below `parent` that exist now (to find orphans after a restart). */
export function listSandboxCgroups(parent: string, root = CGROUP_ROOT): string[] {
  const dir = cgroupVersion(root) === 'v2' ? join(root, parent) : join(root, 'freezer', parent)
  if (!existsSync(dir)) return []
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
}

function readText(file: string): string | null {
  try {
    return readFileSync(file, 'utf8')
  } catch {
    return null
  }
}

function readLines(file: string): string[] {
  return (readText(file) ?? '').split('\n').filter(Boolean)
}

function keyValues(lines: string[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const line of lines) {
    const [key, value] = line.split(/\s+/)
    if (key && value !== undefined) out[key] = Number(value)
  }
  return out
}
