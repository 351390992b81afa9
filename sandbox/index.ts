import { BwrapDriver } from './bwrap/driver'
import { cgroupsAvailable, cgroupVersion } from './cgroup'
import type { SandboxDriver, SandboxKind } from './driver'
import { GvisorDriver, gvisorWorks, type GvisorOptions } from './gvisor/driver'
import { ProcessDriver } from './process'
import { findSocat } from './relay'
import { runscBinary } from './gvisor/runsc-binary'

export { DEFAULT_SANDBOX_LIMITS } from './driver'
export type {
  ExecOptions,
  SandboxDriver,
  SandboxHandle,
  SandboxKind,
  SandboxLimits,
  SandboxProcess,
  SandboxSpec,
  SandboxStats,
} from './driver'
export { ParkError } from './driver'

/**
 * `scope` separates this agentd's sandboxes from any other's on the host (pass something unique
 * to its DATA_DIR: `sweep` removes every sandbox of its scope that is not live).
 */
export type DriverOptions = Omit<GvisorOptions, 'log'>

/** Whether bubblewrap can create all its namespaces here and socat is there for the gateway relay. */
export function bwrapWorks(): boolean {
  return bwrapProblem() === null
}

/**
 * Why bubblewrap cannot make a sandbox here, or null when it can. The probe is tried three times:
 * on a host busy making and tearing down namespaces (the kernel frees them asynchronously) one
 * `--unshare-all` can fail and the next succeed, which must not decide the driver.
 */
export function bwrapProblem(): string | null {
  if (!findSocat()) return 'socat is not installed'
  let why = ''
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      const probe = Bun.spawnSync(['bwrap', '--unshare-all', '--ro-bind', '/', '/', '--dev', '/dev', '--', '/bin/true'], {
        stderr: 'pipe',
        stdout: 'ignore',
      })
      if (probe.exitCode === 0) return null
      why = probe.stderr.toString().trim() || `bwrap exited ${probe.exitCode}`
    } catch (err) {
      return (err as Error).message
    }
    Bun.sleepSync(100 * attempt)
  }
  return why
}

const WHY: Record<SandboxKind, string> = {
  gvisor: 'gVisor (runsc): its own kernel per sandbox, checkpointed to disk when parked',
  bwrap: 'bubblewrap namespaces, frozen by cgroup when parked',
  process: 'plain host processes',
}

/**
 * No isolating driver works here and none was named: agentd refuses to start rather than run
 * agents as plain host processes. The message says what to install, or how to opt in to `process`.
 */
export class NoSandboxError extends Error {
  constructor(reasons: string[]) {
    super(
      `no isolating sandbox driver works on this machine (${reasons.join('; ')}). ` +
        'Install gVisor or bubblewrap (apt-get install runsc socat, or bubblewrap socat) and run agentd as root, ' +
        'or set AGENTD_SANDBOX=process to run agents as plain host processes with NO isolation (development only).',
    )
    this.name = 'NoSandboxError'
  }
}

/** Why gVisor, then bwrap, cannot be the default here (empty when one of them can). */
function whyNotIsolated(): string[] {
  const root = process.getuid?.() === 0
  const why: string[] = []
  if (!root) why.push('agentd is not running as root, which the cgroups and disk images of gvisor and bwrap need')
  if (!runscBinary()) why.push('runsc (gVisor) is not installed')
  if (!Bun.which('bwrap')) why.push('bwrap (bubblewrap) is not installed')
  if (!findSocat()) why.push('socat is not installed')
  if (root && !cgroupsAvailable())
    why.push('no writable cgroup v1 (pids, memory, freezer) or v2 (memory, pids) hierarchy is mounted at /sys/fs/cgroup')
  if (root && runscBinary() && findSocat() && cgroupsAvailable() && !gvisorWorks())
    why.push('runsc is installed but could not start a sandbox (runsc --network=none do /bin/true failed)')
  if (root && Bun.which('bwrap') && findSocat() && !bwrapWorks())
    why.push('bwrap is installed but could not create its namespaces (user namespaces off?)')
  return why
}

/**
 * The driver named by AGENTD_SANDBOX, or the strongest one that works on this machine and
 * enforces the limits: gvisor, then bwrap with cgroups. Never `process` unless named: without an
 * isolating driver this throws NoSandboxError. The choice is logged.
 */
export function createDriver(
  kind: SandboxKind | null,
  log: (line: string) => void = console.warn,
  options: DriverOptions = {},
): SandboxDriver {
  let chosen = kind
  if (chosen === null) {
    if (gvisorWorks()) chosen = 'gvisor'
    else if (cgroupsAvailable() && process.getuid?.() === 0 && bwrapWorks()) chosen = 'bwrap'
    else throw new NoSandboxError(whyNotIsolated())
  }
  if (chosen === 'gvisor') {
    if (kind && !gvisorWorks())
      throw new Error('AGENTD_SANDBOX=gvisor, but gVisor does not work here (it needs root, the runsc and socat packages, and cgroups)')
    const runsc = runscBinary()
    log(
      `agentd: sandbox driver gvisor (${WHY.gvisor}; cgroup ${cgroupVersion()}; runsc ${runsc?.version} from ` +
        `${runsc?.source} at ${runsc?.path}, platform ${runsc?.platform})`,
    )
    return new GvisorDriver({ log, ...options })
  }
  if (chosen === 'bwrap') {
    const problem = kind ? bwrapProblem() : null
    if (problem)
      throw new Error(
        `AGENTD_SANDBOX=bwrap, but bubblewrap does not work here: ${problem} (install the bubblewrap and socat ` +
          'packages; it needs user namespaces)',
      )
    const driver = new BwrapDriver(options)
    log(`agentd: sandbox driver bwrap (${WHY.bwrap}; cgroup ${driver.enforcesLimits ? cgroupVersion() : 'none'})`)
    if (!driver.enforcesLimits)
      log(
        'agentd: WARNING no writable cgroup v1 or v2 hierarchy here: sandbox memory, process and CPU limits ' +
          'are OFF and park stops processes by signal',
      )
    if (!driver.limitsDisk)
      log('agentd: WARNING not running as root: sandboxes have no disk image, so the disk limit (AGENTD_SANDBOX_DISK_MB) is OFF')
    return driver
  }
  log(
    'agentd: WARNING sandbox driver "process" (AGENTD_SANDBOX=process) runs agents as plain host processes with ' +
      'NO isolation and no disk limit (they see the host files and network); use it for development only',
  )
  return new ProcessDriver(options)
}
