/**
 * The sandbox layer: one interface, one driver per isolation technology. A driver knows nothing of
 * sessions; it starts an isolated place with a workspace, runs processes in it and tears it down.
 */

export type SandboxKind = 'gvisor' | 'bwrap' | 'process'

export interface SandboxSpec {
  /** Unique name, used for host paths and container ids. */
  id: string
  /** Host directory mounted read-write as the workspace. */
  hostWorkspace: string
  /** Host directory mounted read-write as the agent's HOME (CLI state lives here across turns). */
  hostHome: string
  /** Host paths the processes need to read (the harness CLIs), mounted read-only at the same path. */
  readOnlyPaths: string[]
}

export interface SandboxHandle {
  readonly id: string
  readonly kind: SandboxKind
  /** The workspace and home as processes inside the sandbox see them. */
  readonly workspace: string
  readonly home: string
  readonly hostWorkspace: string
  readonly hostHome: string
}

export interface ExecOptions {
  env: Record<string, string>
  /** Working directory inside the sandbox; the workspace when omitted. */
  cwd?: string
}

export interface SandboxProcess {
  readonly pid: number
  readonly stdout: ReadableStream<Uint8Array>
  readonly stderr: ReadableStream<Uint8Array>
  readonly exited: Promise<number>
  kill(signal?: NodeJS.Signals): void
}

export interface SandboxDriver {
  readonly kind: SandboxKind
  /** Prepares the sandbox; afterwards `exec` starts processes in it. */
  create(spec: SandboxSpec): Promise<SandboxHandle>
  /** Starts one process with stdout and stderr piped back. */
  exec(handle: SandboxHandle, argv: string[], options: ExecOptions): SandboxProcess
  /** Kills everything in the sandbox and removes it; the host workspace is left to the caller. */
  destroy(handle: SandboxHandle): Promise<void>
}
