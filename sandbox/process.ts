import { mkdirSync } from 'node:fs'
import type { ExecOptions, SandboxDriver, SandboxHandle, SandboxSpec } from './driver'
import { spawnGroup } from './spawn'

/** No isolation at all: plain host processes in the workspace folder. Development only. */
export class ProcessDriver implements SandboxDriver {
  readonly kind = 'process' as const
  private readonly live = new Map<string, Set<{ kill(signal?: NodeJS.Signals): void }>>()

  async create(spec: SandboxSpec): Promise<SandboxHandle> {
    mkdirSync(spec.hostWorkspace, { recursive: true })
    mkdirSync(spec.hostHome, { recursive: true })
    this.live.set(spec.id, new Set())
    return {
      id: spec.id,
      kind: this.kind,
      workspace: spec.hostWorkspace,
      home: spec.hostHome,
      hostWorkspace: spec.hostWorkspace,
      hostHome: spec.hostHome,
    }
  }

  exec(handle: SandboxHandle, argv: string[], options: ExecOptions) {
    const proc = spawnGroup(argv, options.env, options.cwd ?? handle.workspace)
    const procs = this.live.get(handle.id) ?? new Set()
    this.live.set(handle.id, procs)
    procs.add(proc)
    void proc.exited.then(() => procs.delete(proc))
    return proc
  }

  async destroy(handle: SandboxHandle): Promise<void> {
    for (const proc of this.live.get(handle.id) ?? []) proc.kill('SIGKILL')
    this.live.delete(handle.id)
  }
}
