import type { Socket } from 'node:net'
import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import type { SessionRow } from '../session-record/store'

/**
 * A Project's environment as one session's sandbox gets it (contract section 10): its secrets as
 * environment variables, its setup script, and whether it has network through the egress proxy.
 */
export interface SandboxEnvironment {
  /** The Project's secrets, by name: environment variables of the setup and of every turn's CLI. */
  secrets: Record<string, string>
  /** A bash script run once per sandbox before the first turn, or null. */
  setup: string | null
  setupTimeoutMs: number
  /** Whether `network.allow` names anything: then HTTP(S)_PROXY lead to agentd's egress proxy. */
  network: boolean
  /** The environment's revision and the secrets' digest, as read with the values above: with the commit, a prebuilt image's key. */
  revision: number
  secretsDigest: string
}

/** What a prebuilt image is kept by (contract section 10). */
export interface PrebuildKey {
  revision: number
  /** `<branch>@<sha>` of the checkout, '' for a session without a repository. */
  commit: string
  secretsDigest: string
}

/** A sandbox's egress hook (SandboxSpec.egress): a connection that began with a proxy request. */
export type EgressHook = (inner: Socket, head: Buffer) => void

/** The Project's prebuilt images, as the runtime uses them. */
export interface PrebuildPort {
  /**
   * Before the session's sandbox is made: the commit its checkout will get, and the image with the
   * session's key, if one is kept. Null when the session's Project has no setup to skip.
   */
  find(row: SessionRow): Promise<{ commit: string; image: { id: string; image: string } | null } | null>
  /** After a setup exited 0: keeps the sandbox's disk (`write` copies it) under `key`. */
  save(projectId: string, key: PrebuildKey, write: (path: string) => Promise<void>): Promise<{ id: string }>
}

/**
 * The variables a sandbox process gets from its Project: the secrets, and with network the proxy
 * variables every package manager reads (curl, npm, pip, cargo, go and apt honour them). The proxy
 * is the gateway's own address: the sandbox's relay tells a proxy request from a model request by
 * its first bytes, and the relay is the sandbox's own, so no credential names the session. The
 * gateway itself stays direct (NO_PROXY): it is the same address, and a CLI that sent its model
 * requests through the proxy would be refused there, loopback never being a public address. On the
 * driver without network isolation (`process`) nothing is proxied: its processes reach the network as they are.
 */
export function sandboxVariables(env: SandboxEnvironment | null, handle: SandboxHandle, isolated: boolean): Record<string, string> {
  if (!env) return {}
  const vars: Record<string, string> = { ...env.secrets }
  if (env.network && isolated) {
    const gateway = new URL(handle.gatewayUrl)
    const proxy = `http://${gateway.host}`
    for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'http_proxy', 'https_proxy']) vars[name] = proxy
    for (const name of ['NO_PROXY', 'no_proxy']) vars[name] = `${gateway.hostname},localhost`
  }
  return vars
}

/** Setup output stored in the session's log at most (the rest is read and dropped, counted in one line). */
export const SETUP_LOG_MAX_BYTES = 512 * 1024

export type SetupResult = { ok: true } | { ok: false; error: string }

/**
 * Runs the Project's setup script in the sandbox: `bash -e` in the workspace, with the Project's
 * variables, within its time limit. Every line of its output goes to `log` prefixed `setup: `, up
 * to SETUP_LOG_MAX_BYTES; past that the output is still read to its end (so the script never
 * blocks on a full pipe) but dropped, and one line says how much. At the time limit its whole
 * process group is killed.
 */
export async function runSetup(
  driver: SandboxDriver,
  handle: SandboxHandle,
  script: string,
  variables: Record<string, string>,
  timeoutMs: number,
  log: (text: string) => void,
): Promise<SetupResult> {
  const env = { PATH: '/usr/local/bin:/usr/bin:/bin', HOME: handle.home, LANG: 'C.UTF-8', ...variables }
  const proc = driver.exec(handle, ['/bin/bash', '-e', '-c', script, 'setup'], { env, cwd: handle.workspace })
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    proc.kill('SIGKILL')
  }, timeoutMs)
  const output = new SetupOutput(log)
  try {
    const [code] = await Promise.all([proc.exited, output.read(proc.stdout), output.read(proc.stderr)])
    output.end()
    if (timedOut) return { ok: false, error: `setup timed out after ${Math.round(timeoutMs / 1000)} s` }
    return code === 0 ? { ok: true } : { ok: false, error: `setup failed: exit ${code}` }
  } finally {
    clearTimeout(timer)
  }
}

/** Setup's two streams, each split into lines, written to the log as `setup: <line>` within the cap. */
class SetupOutput {
  private logged = 0
  private dropped = 0

  constructor(private readonly log: (text: string) => void) {}

  async read(stream: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder()
    let tail = ''
    for await (const chunk of stream) {
      if (this.dropped > 0) {
        this.dropped += chunk.byteLength
        continue
      }
      const text = tail + decoder.decode(chunk, { stream: true })
      const cut = text.lastIndexOf('\n')
      // A line is logged whole (a secret split between two writes is still masked): the last,
      // unfinished one waits for its end, unless it alone grew past the cap.
      tail = cut < 0 ? text : text.slice(cut + 1)
      if (cut >= 0) this.lines(text.slice(0, cut))
      if (tail.length > SETUP_LOG_MAX_BYTES) {
        this.lines(tail)
        tail = ''
      }
    }
    tail += decoder.decode()
    if (tail !== '') this.lines(tail)
  }

  /** Logs whole lines while they fit; from the first line that does not, nothing more (the log stays a prefix of the output). */
  private lines(text: string): void {
    if (this.dropped > 0) {
      this.dropped += text.length + 1
      return
    }
    const kept: string[] = []
    const lines = text.split('\n')
    for (const [i, line] of lines.entries()) {
      const out = `setup: ${line}\n`
      if (this.logged + out.length > SETUP_LOG_MAX_BYTES) {
        this.dropped = lines.slice(i).reduce((sum, rest) => sum + rest.length + 1, 0)
        break
      }
      this.logged += out.length
      kept.push(out)
    }
    if (kept.length > 0) this.log(kept.join(''))
  }

  end(): void {
    if (this.dropped > 0) this.log(`setup: (about ${this.dropped} more bytes of output not kept)\n`)
  }
}

/** Runs `sync` in the sandbox, so what its processes wrote is on its disk (gVisor's sentry caches writes). */
export async function syncInside(driver: SandboxDriver, handle: SandboxHandle): Promise<void> {
  const proc = driver.exec(handle, ['/bin/sync'], { env: { PATH: '/usr/bin:/bin' } })
  const [code, err] = await Promise.all([proc.exited, new Response(proc.stderr).text(), new Response(proc.stdout).arrayBuffer()])
  if (code !== 0) throw new Error(`sync in the sandbox exited ${code}: ${err.trim()}`)
}

/**
 * Removes `paths` (as the sandbox sees them) by `rm` inside the sandbox: the workspace and home are
 * the sandbox's, so a link planted there is removed, never followed on the host. For a sandbox
 * started from a prebuilt image, which holds what the session it was saved from brought (its
 * attachments, its skills) besides the setup's work.
 */
export async function removeInSandbox(driver: SandboxDriver, handle: SandboxHandle, paths: string[]): Promise<void> {
  const proc = driver.exec(handle, ['/bin/rm', '-rf', '--', ...paths], { env: { PATH: '/usr/bin:/bin' } })
  const [code, err] = await Promise.all([proc.exited, new Response(proc.stderr).text(), new Response(proc.stdout).arrayBuffer()])
  if (code !== 0) throw new Error(`what the prebuilt image's session brought could not be removed: ${err.trim()}`)
}
