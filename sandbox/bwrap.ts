import { existsSync, mkdirSync } from 'node:fs'
import type { ExecOptions, SandboxDriver, SandboxHandle, SandboxSpec } from './driver'
import { spawnGroup } from './spawn'

export const BWRAP_WORKSPACE = '/workspace'
export const BWRAP_HOME = '/home/agent'

/**
 * bubblewrap argv for one process: every namespace unshared but the network (the model gateway is
 * reached over loopback until the gateway relay lands), a read-only system, the workspace and
 * home bound read-write, a private /tmp, and the environment cleared.
 */
export function bwrapArgs(handle: Pick<SandboxHandle, 'hostWorkspace' | 'hostHome'>, readOnlyPaths: string[], argv: string[], options: ExecOptions): string[] {
  const args = ['bwrap', '--unshare-all', '--share-net', '--die-with-parent', '--new-session']
  args.push('--ro-bind', '/usr', '/usr')
  for (const link of ['bin', 'lib', 'lib64', 'sbin']) {
    if (existsSync(`/${link}`)) args.push('--symlink', `usr/${link}`, `/${link}`)
  }
  args.push('--ro-bind', '/etc', '/etc', '--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp')
  for (const path of readOnlyPaths) args.push('--ro-bind', path, path)
  args.push('--bind', handle.hostHome, BWRAP_HOME, '--bind', handle.hostWorkspace, BWRAP_WORKSPACE)
  args.push('--chdir', options.cwd ?? BWRAP_WORKSPACE, '--clearenv')
  for (const [key, value] of Object.entries(options.env)) args.push('--setenv', key, value)
  args.push('--', ...argv)
  return args
}

export class BwrapDriver implements SandboxDriver {
  readonly kind = 'bwrap' as const
  private readonly specs = new Map<string, SandboxSpec>()
  private readonly live = new Map<string, Set<{ kill(signal?: NodeJS.Signals): void }>>()

  async create(spec: SandboxSpec): Promise<SandboxHandle> {
    mkdirSync(spec.hostWorkspace, { recursive: true })
    mkdirSync(spec.hostHome, { recursive: true })
    this.specs.set(spec.id, spec)
    this.live.set(spec.id, new Set())
    return {
      id: spec.id,
      kind: this.kind,
      workspace: BWRAP_WORKSPACE,
      home: BWRAP_HOME,
      hostWorkspace: spec.hostWorkspace,
      hostHome: spec.hostHome,
    }
  }

  exec(handle: SandboxHandle, argv: string[], options: ExecOptions) {
    const readOnly = this.specs.get(handle.id)?.readOnlyPaths ?? []
    const proc = spawnGroup(bwrapArgs(handle, readOnly, argv, options), { PATH: process.env.PATH ?? '/usr/bin:/bin' }, handle.hostWorkspace)
    const procs = this.live.get(handle.id) ?? new Set()
    this.live.set(handle.id, procs)
    procs.add(proc)
    void proc.exited.then(() => procs.delete(proc))
    return proc
  }

  async destroy(handle: SandboxHandle): Promise<void> {
    for (const proc of this.live.get(handle.id) ?? []) proc.kill('SIGKILL')
    this.live.delete(handle.id)
    this.specs.delete(handle.id)
  }
}
