import { BwrapDriver } from './bwrap'
import type { SandboxDriver, SandboxKind } from './driver'
import { ProcessDriver } from './process'

export type { SandboxDriver, SandboxHandle, SandboxKind, SandboxProcess, SandboxSpec } from './driver'

/** Whether bubblewrap can create namespaces here (it needs root or unprivileged user namespaces). */
export function bwrapWorks(): boolean {
  try {
    const probe = Bun.spawnSync(['bwrap', '--unshare-all', '--ro-bind', '/', '/', '--dev', '/dev', '--', '/bin/true'], { stderr: 'ignore', stdout: 'ignore' })
    return probe.exitCode === 0
  } catch {
    return false
  }
}

/**
 * The driver named by AGENTD_SANDBOX, or the strongest one that works on this machine.
 * gVisor joins the probe order when its driver lands.
 */
export function createDriver(kind: SandboxKind | null, log: (line: string) => void = console.warn): SandboxDriver {
  const chosen = kind ?? (bwrapWorks() ? 'bwrap' : 'process')
  if (chosen === 'gvisor') throw new Error('AGENTD_SANDBOX=gvisor: the gVisor driver is not available in this build; use bwrap or process')
  if (chosen === 'bwrap') {
    if (!bwrapWorks()) throw new Error('AGENTD_SANDBOX=bwrap, but bubblewrap does not work here (install the bubblewrap package; it needs user namespaces)')
    log('agentd: sandbox driver bwrap (bubblewrap namespaces)')
    return new BwrapDriver()
  }
  log('agentd: WARNING sandbox driver "process" runs agents as plain host processes with NO isolation; use it for development only')
  return new ProcessDriver()
}
