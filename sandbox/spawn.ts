import type { SandboxProcess } from './driver'

/**
 * The one place that spawns host processes for the drivers. Each process leads its own process
 * group (detached), so a kill reaches every child the agent started, not only the CLI.
 */
export function spawnGroup(argv: string[], env: Record<string, string>, cwd: string): SandboxProcess {
  const child = Bun.spawn(argv, { env, cwd, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe', detached: true })
  return {
    pid: child.pid,
    stdout: child.stdout,
    stderr: child.stderr,
    exited: child.exited,
    kill(signal = 'SIGKILL') {
      try {
        process.kill(-child.pid, signal)
      } catch {
        child.kill(signal) // the group is already gone; make sure the leader is too
      }
    },
  }
}
