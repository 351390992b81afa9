import { readFileSync } from 'node:fs'
import { availableParallelism, totalmem } from 'node:os'
import { dirname, join } from 'node:path'

/**
 * The cores and memory agentd may use: the machine's, lowered by the limits of the cgroups agentd
 * runs in (a container's `--memory` and `--cpus`), which `os.totalmem()` and the CPU count ignore.
 * Capacity defaults derived from the machine's figures alone would admit sandboxes the container's
 * limits then kill or starve.
 */
export interface HostResources {
  cores: number
  memoryBytes: number
  /** What lowered the machine's figures, for the start line; empty when nothing did. */
  limitedBy: string[]
}

/** Where the kernel shows cgroups; tests point these at a copy. */
export interface CgroupPaths {
  /** `/sys/fs/cgroup` */
  root: string
  /** `/proc/self/cgroup` */
  self: string
}

const SYSTEM: CgroupPaths = { root: '/sys/fs/cgroup', self: '/proc/self/cgroup' }

export function hostResources(
  paths: CgroupPaths = SYSTEM,
  machine = { cores: availableParallelism(), memoryBytes: totalmem() },
): HostResources {
  const limits = cgroupLimits(paths)
  const limitedBy: string[] = []
  let { cores, memoryBytes } = machine
  if (limits.memoryBytes !== null && limits.memoryBytes < memoryBytes) {
    memoryBytes = limits.memoryBytes
    limitedBy.push('the cgroup memory limit')
  }
  if (limits.cpus !== null && limits.cpus < cores) {
    // A fraction of a core still runs one start at a time.
    cores = Math.max(1, Math.floor(limits.cpus))
    limitedBy.push('the cgroup CPU quota')
  }
  return { cores, memoryBytes, limitedBy }
}

/** The lowest memory limit and CPU quota (in cores) on the way from agentd's cgroups to the root; null where none is set. */
export function cgroupLimits(paths: CgroupPaths = SYSTEM): { memoryBytes: number | null; cpus: number | null } {
  const membership = readText(paths.self)
  if (membership === null) return { memoryBytes: null, cpus: null }
  let memoryBytes: number | null = null
  let cpus: number | null = null
  const lower = (current: number | null, value: number | null) =>
    value === null ? current : current === null ? value : Math.min(current, value)
  for (const line of membership.split('\n')) {
    const [, controllers, path] = /^\d+:([^:]*):(.*)$/.exec(line.trim()) ?? []
    if (controllers === undefined || path === undefined) continue
    if (controllers === '') {
      // v2: one hierarchy; memory.max and cpu.max ("max" when unset) at every level.
      for (const dir of upFrom(paths.root, path)) {
        memoryBytes = lower(memoryBytes, limitNumber(readText(join(dir, 'memory.max'))))
        cpus = lower(cpus, quotaCores(readText(join(dir, 'cpu.max'))?.split(' ')))
      }
      continue
    }
    const names = controllers.split(',')
    if (names.includes('memory')) {
      for (const dir of upFrom(join(paths.root, 'memory'), path))
        memoryBytes = lower(memoryBytes, limitNumber(readText(join(dir, 'memory.limit_in_bytes'))))
    }
    if (names.includes('cpu')) {
      for (const dir of upFrom(join(paths.root, controllers), path)) {
        cpus = lower(cpus, quotaCores([readText(join(dir, 'cpu.cfs_quota_us')) ?? '', readText(join(dir, 'cpu.cfs_period_us')) ?? '']))
      }
    }
  }
  return { memoryBytes, cpus }
}

/**
 * The cgroup's folder and each parent's, up to the hierarchy's root. Inside a cgroup namespace
 * the path is `/` and the mount's root is agentd's own cgroup.
 */
function upFrom(mount: string, path: string): string[] {
  const dirs: string[] = []
  let dir = join(mount, path)
  while (dir.startsWith(mount)) {
    dirs.push(dir)
    if (dir === mount) break
    dir = dirname(dir)
  }
  return dirs
}

/** A byte limit; null for "max", v1's "no limit" (near 2^63) and anything unreadable. */
function limitNumber(text: string | null): number | null {
  if (text === null || text === 'max') return null
  const value = Number(text)
  return Number.isFinite(value) && value > 0 && value < 2 ** 62 ? value : null
}

/** Cores from a quota and period in microseconds; null when there is no quota ("max", -1). */
function quotaCores(parts: string[] | undefined): number | null {
  const [quota, period] = (parts ?? []).map(Number)
  return quota !== undefined && period !== undefined && quota > 0 && period > 0 ? quota / period : null
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim()
  } catch {
    return null
  }
}
