import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'

const root = join(import.meta.dir, '..', '..')
const bun = process.execPath

export interface RunningServer {
  url: string
  proc: Subprocess<'ignore', 'ignore', 'pipe'>
  /** Everything the server logged so far. */
  log(): string
  stop(signal?: NodeJS.Signals): Promise<void>
}

/** Starts `bun src/main.ts` as its own process on a free port, as `npm start` does. */
export async function startServer(env: Record<string, string>): Promise<RunningServer> {
  const proc = Bun.spawn([bun, join(root, 'src/main.ts')], {
    cwd: root,
    // No warm sandboxes unless asked (as in makeTestApp).
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/root', PORT: '0', AGENTD_WARM_SANDBOXES: '0', ...env },
    stdin: 'ignore',
    stdout: 'ignore',
    stderr: 'pipe',
  })
  let logged = ''
  const decoder = new TextDecoder()
  let drained: Promise<void> = Promise.resolve()
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${logged}`)), 20_000)
    drained = (async () => {
      for await (const chunk of proc.stderr) {
        logged += decoder.decode(chunk, { stream: true })
        const match = /listening on (http:\/\/\S+)/.exec(logged)
        if (match) {
          clearTimeout(timer)
          resolve(match[1]!)
        }
      }
      clearTimeout(timer)
      reject(new Error(`server exited before listening:\n${logged}`))
    })()
  })
  return {
    url,
    proc,
    log: () => logged,
    async stop(signal = 'SIGTERM') {
      proc.kill(signal)
      await proc.exited
      // Its last lines may still be in the pipe when it has exited: read to the end (bounded, in
      // case a process it started kept the pipe open).
      await Promise.race([drained.catch(() => {}), Bun.sleep(10_000)])
    },
  }
}

/** Runs the admin CLI as a real process, as an operator would. */
export function admin(dataDir: string, ...args: string[]): Promise<{ code: number; json: any; stderr: string }> {
  return adminWith({}, dataDir, ...args)
}

/** `admin` with more of the environment (a GitHub App's, say). */
export async function adminWith(
  env: Record<string, string>,
  dataDir: string,
  ...args: string[]
): Promise<{ code: number; json: any; stderr: string }> {
  const proc = Bun.spawn([bun, join(root, 'src/admin/cli.ts'), ...args], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env, DATA_DIR: dataDir },
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { code, json: code === 0 ? JSON.parse(stdout) : null, stderr }
}

/** A fresh DATA_DIR with org `acme` and its admin, made with the admin CLI as an operator would. */
export async function seededDataDir(prefix: string): Promise<{ dir: string; token: string }> {
  const dir = mkdtempSync(join(tmpdir(), `${prefix}-`))
  await admin(dir, 'org', 'create', 'acme')
  const token = (await admin(dir, 'user', 'create', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'admin')).json.token as string
  return { dir, token }
}

/** JSON calls as `token` to whatever server `current()` returns, so a test can restart it. */
export function client(current: () => RunningServer, token: string) {
  return async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${current().url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    return { status: res.status, body: await res.json() }
  }
}
