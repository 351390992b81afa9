import type { Subprocess } from 'bun'
import type { SandboxProcess } from './driver'

/**
 * The one place that spawns host processes for the drivers. Each process leads its own process
 * group (detached), so a kill reaches every child the agent started, not only the CLI.
 */
export function spawnGroup(argv: string[], env: Record<string, string>, cwd: string, fd3?: number): SandboxProcess {
  const stdio = fd3 === undefined ? (['ignore', 'pipe', 'pipe'] as const) : (['ignore', 'pipe', 'pipe', fd3] as const)
  const child = Bun.spawn(argv, { env, cwd, stdio: [...stdio], detached: true })
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

/** A helper process of a driver (a relay, a runsc command): its own group, stdio as given. */
export function spawnHelper(
  argv: string[],
  options: { env?: Record<string, string>; cwd?: string; output?: 'ignore' | 'pipe' } = {},
): Subprocess<'ignore', 'pipe' | 'ignore', 'pipe' | 'ignore'> {
  const output = options.output ?? 'ignore'
  return Bun.spawn(argv, {
    env: options.env ?? { PATH: '/usr/bin:/bin:/usr/sbin:/sbin' },
    cwd: options.cwd ?? '/',
    stdin: 'ignore',
    stdout: output,
    stderr: output,
    detached: true,
  })
}

/**
 * Runs a helper to completion: its exit code and output. A helper that leaves daemons behind
 * (`runsc run --detach`) must pass `logFile`: its daemons inherit stdout and stderr, so pipes
 * would never end; its output goes to that file instead (and comes back as `stderr`).
 */
export async function runHelper(
  argv: string[],
  timeoutMs = 60_000,
  logFile?: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  if (logFile) {
    const child = Bun.spawn(argv, {
      env: { PATH: '/usr/bin:/bin:/usr/sbin:/sbin' },
      cwd: '/',
      stdin: 'ignore',
      stdout: Bun.file(logFile),
      stderr: Bun.file(logFile),
      detached: true,
    })
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    const code = await child.exited
    clearTimeout(timer)
    return {
      code,
      stdout: '',
      stderr: await Bun.file(logFile)
        .text()
        .catch(() => ''),
    }
  }
  const child = spawnHelper(argv, { output: 'pipe' })
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    child.kill('SIGKILL')
  }, timeoutMs)
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  clearTimeout(timer)
  return { code, stdout, stderr: timedOut ? `${stderr}\n(${argv[0]} did not finish within ${timeoutMs} ms and was killed)` : stderr }
}
