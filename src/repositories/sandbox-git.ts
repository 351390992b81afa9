import type { SandboxDriver, SandboxHandle, SandboxProcess } from '../../sandbox/driver'

/**
 * git as agentd itself runs it in a sandbox (the checkout before the first turn, the commit and
 * push after each): inside the sandbox, never on the host, and on the sandbox's terms in nothing.
 * The checkout's `.git`, the home's `.gitconfig` and every file git might read are the sandbox's,
 * so what agentd's git obeys comes from its environment, which the sandbox cannot touch: no
 * system or global config, the hooks folder a path with nothing in it, and (publish-script in
 * clone.ts) the repository's own config put aside. Its output is read up to a cap, and it is
 * killed at the turn's deadline. See docs/decisions.md, "agentd's git in the sandbox".
 */

/** Bytes of stdout and of stderr kept from a git run; past them the stream is dropped. */
export const GIT_OUTPUT_CAP = 64 * 1024

/** How long the output of a run that exited is waited for (a descendant may hold it open). */
const OUTPUT_GRACE_MS = 1000

/** Config set on git's command line (GIT_CONFIG_COUNT): it wins over every config file. */
export function gitParameters(entries: [string, string][]): Record<string, string> {
  const env: Record<string, string> = { GIT_CONFIG_COUNT: String(entries.length) }
  entries.forEach(([key, value], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = key
    env[`GIT_CONFIG_VALUE_${i}`] = value
  })
  return env
}

/** What makes the sandbox's git reach the code host through the gateway, with the turn's key. */
export function gatewayEntries(gatewayUrl: string, token: string, remoteBase: string): [string, string][] {
  const through = `${gatewayUrl}/git/`
  return [
    [`url.${through}.insteadOf`, `${remoteBase.replace(/\/+$/, '')}/`],
    [`http.${through}.extraHeader`, `Authorization: Bearer ${token}`],
    ['user.name', 'agentd'],
    ['user.email', 'agentd@localhost'],
  ]
}

/**
 * The environment of agentd's git in `handle`. No system config; hooks looked for in /dev/null
 * (`/dev/null/pre-commit` is never a file), no fsmonitor, no credential helper, no signing, no
 * automatic gc. With `gateway`, the global config is none either (the home's `.gitconfig`, which
 * the sandbox may have rewritten during the turn, is not read) and the gateway's URL and key come
 * from here; without it (the checkout, before anything of the sandbox's has run) the home's
 * config, just written by agentd, is.
 */
export function gitEnvironment(handle: SandboxHandle, gateway?: { token: string; remoteBase: string }): Record<string, string> {
  const entries: [string, string][] = [
    ['core.hooksPath', '/dev/null'],
    ['core.fsmonitor', 'false'],
    ['credential.helper', ''],
    ['commit.gpgSign', 'false'],
    ['gc.auto', '0'],
    ['maintenance.auto', 'false'],
    ...(gateway ? gatewayEntries(handle.gatewayUrl, gateway.token, gateway.remoteBase) : []),
  ]
  return {
    PATH: '/usr/bin:/bin',
    HOME: handle.home,
    GIT_TERMINAL_PROMPT: '0',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_ATTR_NOSYSTEM: '1',
    ...(gateway ? { GIT_CONFIG_GLOBAL: '/dev/null' } : {}),
    ...gitParameters(entries),
  }
}

/** A run of agentd's git past its deadline: killed, its turn timed out. */
export class GitDeadlineError extends Error {
  constructor() {
    super("git was stopped at the turn's deadline")
  }
}

/**
 * Runs a shell script in the sandbox and resolves to its exit code and the first GIT_OUTPUT_CAP
 * bytes of its stdout and stderr (the rest is dropped: a stream is cancelled once its cap is
 * reached). `signal` (the turn's deadline) kills it, process group and all, and rejects with
 * GitDeadlineError at once, whatever still holds its output open.
 */
export async function runGit(
  driver: SandboxDriver,
  handle: SandboxHandle,
  argv: string[],
  env: Record<string, string>,
  signal?: AbortSignal,
): Promise<{ code: number; stdout: string; stderr: string }> {
  if (signal?.aborted) throw new GitDeadlineError()
  const proc = driver.exec(handle, argv, { env })
  return bounded(proc, signal)
}

/** The exit and bounded output of `proc`, or GitDeadlineError once `signal` aborts. */
export async function bounded(proc: SandboxProcess, signal?: AbortSignal): Promise<{ code: number; stdout: string; stderr: string }> {
  let release!: () => void
  const stop = new Promise<null>((resolve) => (release = () => resolve(null)))
  const kill = () => {
    proc.kill('SIGKILL')
    release()
  }
  signal?.addEventListener('abort', kill, { once: true })
  const out = readCapped(proc.stdout, stop)
  const err = readCapped(proc.stderr, stop)
  try {
    const code = await Promise.race([proc.exited, stop])
    if (code === null) throw new GitDeadlineError()
    // A descendant that left the process group (a daemon) may hold the output open: not waited for.
    const grace = setTimeout(release, OUTPUT_GRACE_MS)
    const [stdout, stderr] = await Promise.all([out, err])
    clearTimeout(grace)
    return { code, stdout, stderr }
  } finally {
    signal?.removeEventListener('abort', kill)
    release()
  }
}

/** Up to GIT_OUTPUT_CAP bytes of `stream` as text; the stream is cancelled at the cap, its end, or `stop`. */
async function readCapped(stream: ReadableStream<Uint8Array>, stop: Promise<null>): Promise<string> {
  const reader = stream.getReader()
  const kept = new Uint8Array(GIT_OUTPUT_CAP)
  let length = 0
  try {
    while (length < GIT_OUTPUT_CAP) {
      const next = await Promise.race([reader.read(), stop])
      if (next === null || next.done) break
      const part = next.value.subarray(0, GIT_OUTPUT_CAP - length)
      kept.set(part, length)
      length += part.length
    }
  } finally {
    // Past the cap the rest is not read: on a pipe the writer gets EPIPE, a tailed file is dropped.
    reader.cancel().catch(() => {})
  }
  return new TextDecoder().decode(kept.subarray(0, length))
}
