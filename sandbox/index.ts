import { BwrapDriver, findSocat } from './bwrap'
import type { SandboxDriver, SandboxKind } from './driver'
import { GvisorDriver, gvisorWorks, type GvisorOptions } from './gvisor'
import { ProcessDriver } from './process'

export { DEFAULT_SANDBOX_LIMITS } from './driver'
export type { ExecOptions, SandboxDriver, SandboxHandle, SandboxKind, SandboxLimits, SandboxProcess, SandboxSpec, SandboxStats } from './driver'
export { ParkError } from './driver'

/**
 * `scope` separates this agentd's sandboxes from any other's on the host (pass something unique
 * to its DATA_DIR: `sweep` removes every sandbox of its scope that is not live).
 */
export type DriverOptions = Omit<GvisorOptions, 'log'>

/** Whether bubblewrap can create all its namespaces here and socat is there for the gateway relay. */
export function bwrapWorks(): boolean {
  if (!findSocat()) return false
  try {
    const probe = Bun.spawnSync(['bwrap', '--unshare-all', '--ro-bind', '/', '/', '--dev', '/dev', '--', '/bin/true'], { stderr: 'ignore', stdout: 'ignore' })
    return probe.exitCode === 0
  } catch {
    return false
  }
}

const WHY: Record<SandboxKind, string> = {
  gvisor: 'gVisor (runsc): its own kernel per sandbox, checkpointed to disk when parked',
  bwrap: 'bubblewrap namespaces, frozen by cgroup when parked',
  process: 'plain host processes',
}

/**
 * The driver named by AGENTD_SANDBOX, or the strongest one that works on this machine: gvisor,
 * then bwrap, then (with a loud warning) process. The choice is logged.
 */
export function createDriver(kind: SandboxKind | null, log: (line: string) => void = console.warn, options: DriverOptions = {}): SandboxDriver {
  const chosen = kind ?? (gvisorWorks() ? 'gvisor' : bwrapWorks() ? 'bwrap' : 'process')
  if (chosen === 'gvisor') {
    if (kind && !gvisorWorks()) throw new Error('AGENTD_SANDBOX=gvisor, but gVisor does not work here (it needs root, the runsc and socat packages, and cgroups)')
    log(`agentd: sandbox driver gvisor (${WHY.gvisor})`)
    return new GvisorDriver({ log, ...options })
  }
  if (chosen === 'bwrap') {
    if (kind && !bwrapWorks()) throw new Error('AGENTD_SANDBOX=bwrap, but bubblewrap does not work here (install the bubblewrap and socat packages; it needs user namespaces)')
    const driver = new BwrapDriver(options)
    log(`agentd: sandbox driver bwrap (${WHY.bwrap})`)
    if (!driver.enforcesLimits) log('agentd: WARNING no writable cgroup v1 freezer/memory/pids here: sandbox memory and process limits are OFF and park stops processes by signal')
    return driver
  }
  log('agentd: WARNING sandbox driver "process" runs agents as plain host processes with NO isolation (they see the host files and network); use it for development only')
  return new ProcessDriver(options)
}
