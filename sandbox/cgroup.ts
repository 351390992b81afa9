import { existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { SandboxLimits } from './driver'

/**
 * One sandbox's cgroups (v1: freezer, memory and pids hierarchies): every process of the sandbox
 * is in them from its first instruction (see `cgroupWrapArgs`), so park freezes all of them,
 * forks and setsid children included, the limits cover all of them, and destroy finds them all.
 */

export const CGROUP_ROOT = '/sys/fs/cgroup'
const CONTROLLERS = ['pids', 'memory', 'freezer'] as const
type Controller = (typeof CONTROLLERS)[number]

/** Whether cgroup v1 freezer, memory and pids hierarchies are mounted and writable here. */
export function cgroupsAvailable(root = CGROUP_ROOT): boolean {
  if (process.getuid?.() !== 0) return false
  return CONTROLLERS.every((c) => existsSync(join(root, c, 'cgroup.procs')))
}

/** Cgroup directory names are restricted to a safe alphabet (no leading dot); anything else is replaced. */
export function cgroupName(id: string): string {
  return id.replace(/[^A-Za-z0-9_.-]/g, '_').replace(/^\.+/, (dots) => '_'.repeat(dots.length)) || '_'
}

/**
 * argv that joins the cgroups listed in `procsFiles` (in order) and then execs `argv`: a `sh` that
 * writes its own pid into each `cgroup.procs` and replaces itself with the command, so the command
 * and everything it starts is inside from its first instruction. The freezer goes last, so a
 * process started while the sandbox is parked is fully placed before it stops.
 */
export function cgroupWrapArgs(procsFiles: string[], argv: string[]): string[] {
  const script = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"'
  return ['/bin/sh', '-c', script, 'agentd-cgroup', String(procsFiles.length), ...procsFiles, ...argv]
}

export interface CgroupStats {
  /** Anonymous memory and tmpfs of the sandbox's processes (`rss + shmem` of memory.stat). */
  memoryBytes: number
  processes: number
  /** Processes the kernel killed for going over the memory limit, since the cgroup was made. */
  oomKills: number
}

export class SandboxCgroup {
  constructor(
    /** `<parent>/<name>` below each hierarchy, e.g. `agentd/<sandbox id>`. */
    readonly path: string,
    private readonly root = CGROUP_ROOT,
  ) {}

  static for(parent: string, id: string, root = CGROUP_ROOT): SandboxCgroup {
    return new SandboxCgroup(`${parent}/${cgroupName(id)}`, root)
  }

  private dir(controller: Controller): string {
    return join(this.root, controller, this.path)
  }

  /** The `cgroup.procs` files a new process writes itself into, in joining order. */
  procsFiles(): string[] {
    return CONTROLLERS.map((c) => join(this.dir(c), 'cgroup.procs'))
  }

  exists(): boolean {
    return existsSync(this.dir('freezer'))
  }

  /** Creates the cgroups (or reuses them) and applies the limits. */
  create(limits: SandboxLimits): void {
    for (const c of CONTROLLERS) mkdirSync(this.dir(c), { recursive: true })
    writeFileSync(join(this.dir('pids'), 'pids.max'), String(limits.maxProcesses))
    const memory = this.dir('memory')
    writeFileSync(join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes))
    // With swap accounting, the same limit on memory+swap, so the limit cannot be escaped into swap.
    const memsw = join(memory, 'memory.memsw.limit_in_bytes')
    if (existsSync(memsw)) writeFileSync(memsw, String(limits.memoryBytes))
    this.thaw()
  }

  pids(): number[] {
    const seen = new Set<number>()
    for (const c of CONTROLLERS) {
      for (const line of readLines(join(this.dir(c), 'cgroup.procs'))) seen.add(Number(line))
    }
    return [...seen].filter((pid) => pid > 0)
  }

  /** Freezes every process; resolves once the kernel reports them all stopped. */
  async freeze(timeoutMs = 5000): Promise<void> {
    const state = join(this.dir('freezer'), 'freezer.state')
    writeFileSync(state, 'FROZEN')
    const deadline = Date.now() + timeoutMs
    while (readFileSync(state, 'utf8').trim() !== 'FROZEN') {
      if (Date.now() > deadline) {
        this.thaw()
        throw new Error(`the sandbox's processes did not freeze within ${timeoutMs} ms`)
      }
      await Bun.sleep(2)
    }
  }

  thaw(): void {
    const state = join(this.dir('freezer'), 'freezer.state')
    if (existsSync(state)) writeFileSync(state, 'THAWED')
  }

  frozen(): boolean {
    const state = join(this.dir('freezer'), 'freezer.state')
    return existsSync(state) && readFileSync(state, 'utf8').trim() !== 'THAWED'
  }

  /**
   * Kills every process in the cgroups: frozen first so nothing forks in between, then SIGKILL to
   * all, then thawed so the signals are delivered; repeated until the cgroups are empty.
   */
  async killAll(timeoutMs = 5000): Promise<void> {
    if (!this.exists()) return
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const pids = this.pids()
      if (pids.length === 0) return
      if (Date.now() > deadline) throw new Error(`processes ${pids.join(', ')} of cgroup ${this.path} did not die`)
      await this.freeze(1000).catch(() => {})
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
    for (const c of CONTROLLERS) {
      const dir = this.dir(c)
      for (let attempt = 0; existsSync(dir); attempt++) {
        try {
          rmdirSync(dir)
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
    const oom = keyValues(readLines(join(memory, 'memory.oom_control')))
    return {
      memoryBytes: (stat.total_rss ?? stat.rss ?? 0) + (stat.total_shmem ?? stat.shmem ?? 0),
      processes: this.pids().length,
      oomKills: oom.oom_kill ?? 0,
    }
  }
}

/** Names of the sandbox cgroups below `parent` that exist now (to find orphans after a restart). */
export function listSandboxCgroups(parent: string, root = CGROUP_ROOT): string[] {
  const dir = join(root, 'freezer', parent)
  if (!existsSync(dir)) return []
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name)
}

function readLines(file: string): string[] {
  try {
    return readFileSync(file, 'utf8').split('\n').filter(Boolean)
  } catch {
    return []
  }
}

function keyValues(lines: string[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const line of lines) {
    const [key, value] = line.split(/\s+/)
    if (key && value !== undefined) out[key] = Number(value)
  }
  return out
}
