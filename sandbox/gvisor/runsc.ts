import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cgroupsAvailable } from '../cgroup'
import { BOOT_FLAGS, runscArgs } from './spec'
import { niced } from '../priority'
import { defaultRunRoot, findSocat } from '../relay'
import { runscBinary } from './runsc-binary'

export { runscBinary }
import { runHelper } from '../spawn'

/** The runsc command line of one state root, as the gVisor driver uses it. */
export class Runsc {
  constructor(readonly root: string) {}

  args(...args: string[]): string[] {
    return runscArgs(this.root, ...args)
  }

  run(args: string[], timeoutMs = 60_000) {
    return runHelper(this.args(...args), timeoutMs)
  }

  /** Boots a container (`run` or `restore`, with BOOT_FLAGS); its output goes to `logFile` (it leaves daemons). */
  boot(command: 'run' | 'restore', args: string[], logFile: string) {
    // Niced: the sandbox (sentry and gofer) inherits it, below agentd in CPU priority (priority.ts).
    return runHelper(niced(this.args(...BOOT_FLAGS, command, '--detach', ...args)), 300_000, logFile)
  }

  delete(cid: string) {
    return this.run(['delete', '--force', cid])
  }

  async list(): Promise<string[]> {
    return (await this.run(['list', '--quiet'])).stdout.split('\n').filter(Boolean)
  }

  async state(cid: string): Promise<{ status: string; pid: number } | null> {
    const state = await this.run(['state', cid])
    if (state.code !== 0) return null
    try {
      const parsed = JSON.parse(state.stdout) as { status: string; pid: number }
      return { status: parsed.status, pid: parsed.pid }
    } catch {
      return null
    }
  }

  /** Number of processes in the container. */
  async processes(cid: string): Promise<number> {
    try {
      return (JSON.parse((await this.run(['ps', '--format=json', cid])).stdout) as unknown[]).length
    } catch {
      return 0
    }
  }
}

let probed: boolean | null = null

/**
 * Whether gVisor works here as the driver uses it (root, runsc, socat, cgroups); probed once per
 * process, and once per boot and runsc binary: a passed probe is remembered in the run folder
 * (a tmpfs, emptied by a reboot) under the binary's identity, so a restart, when every second
 * before /healthz counts, skips the 200 ms `runsc do`.
 */
export function gvisorWorks(): boolean {
  if (probed !== null) return probed
  probed = false
  const runsc = runscBinary()?.path
  if (process.getuid?.() !== 0 || !runsc || !findSocat() || !cgroupsAvailable()) return false
  const remembered = join(defaultRunRoot(), 'runsc-works')
  const identity = binaryIdentity(runsc)
  if (identity !== null && readText(remembered) === identity) return (probed = true)
  const root = join(defaultRunRoot(), `probe-${process.pid}`)
  try {
    const probe = Bun.spawnSync([runsc, `--root=${root}`, '--network=none', 'do', '/bin/true'], {
      stdout: 'ignore',
      stderr: 'ignore',
      timeout: 30_000,
    })
    probed = probe.exitCode === 0
  } catch {
    probed = false
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
  if (probed && identity !== null) {
    try {
      mkdirSync(defaultRunRoot(), { recursive: true, mode: 0o700 })
      writeFileSync(remembered, identity, { mode: 0o600 })
    } catch {
      // not remembered: the next start probes again
    }
  }
  return probed
}

/**
 * The binary's path, size, change time and inode, with the kernel's release and this boot's id: a
 * new install, kernel or boot is another identity (even where /run outlives a boot).
 */
export function binaryIdentity(path: string): string | null {
  try {
    const stat = statSync(path)
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim()
    return `${path} ${stat.size} ${stat.ctimeMs} ${stat.ino} ${readFileSync('/proc/sys/kernel/osrelease', 'utf8').trim()} ${boot}`
  } catch {
    return null
  }
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8')
  } catch {
    return null
  }
}

/** A live host process (a zombie is dead). */
export function alive(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z'
  } catch {
    return false
  }
}

/** The first non-empty line of a command's output, for an error message. */
export function firstLine(text: string): string {
  const line = text.split('\n').find((l) => l.trim() !== '') ?? 'no output'
  return line.length > 300 ? `${line.slice(0, 300)}…` : line
}
