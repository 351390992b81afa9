import type { ExecOptions, SandboxHandle, SandboxSpec } from './driver'
import { HostDriver, type HostCommand, type HostSandbox } from './host-driver'

/**
 * No isolation at all: plain host processes in the workspace folder, for development on machines
 * with neither gVisor nor bubblewrap. They see the whole host and its network; the gateway is
 * reached at its host address. Park, wake and the limits still work through cgroups when agentd
 * runs as root on cgroup v1 (otherwise park stops process groups by signal and limits are off).
 */
export class ProcessDriver extends HostDriver {
  readonly kind = 'process' as const
  readonly isolatesNetwork = false

  protected describe(spec: SandboxSpec): Pick<SandboxHandle, 'workspace' | 'home' | 'gatewayUrl'> {
    return { workspace: spec.hostWorkspace, home: spec.hostHome, gatewayUrl: gatewayUrl(spec.gateway) }
  }

  protected command(sandbox: HostSandbox, argv: string[], options: ExecOptions): HostCommand {
    return { argv, env: options.env, cwd: options.cwd ?? sandbox.spec.hostWorkspace }
  }
}

/** `http://host:port` for a TCP address (IPv6 literals bracketed). */
export function gatewayUrl(address: { host: string; port: number }): string {
  const host = address.host.includes(':') ? `[${address.host}]` : address.host
  return `http://${host}:${address.port}`
}
