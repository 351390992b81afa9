import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'

export interface NpmRegistry {
  /** http://127.0.0.1:<port> */
  url: string
  port: number
  /** Requests the registry has served so far (method and path), from its own http log. */
  requests(): string[]
  /** Publishes a package made of `files` (package.json written from name and version) with the real npm CLI. */
  publish(name: string, version: string, files: Record<string, string>): Promise<void>
  /**
   * A package-lock.json for a project depending on `dependencies`, made by the real npm CLI against
   * this registry, its tarball URLs then naming `registryHost` (the name a sandbox reaches it by).
   */
  lockfile(dependencies: Record<string, string>, registryHost: string): Promise<string>
  stop(): Promise<void>
}

const root = join(import.meta.dir, '..', '..')

/**
 * A real npm registry on loopback: Verdaccio (from npm), run by Bun with its own storage in a temp
 * folder, no uplinks (nothing leaves the machine), anyone may publish. Its http log (JSON lines on
 * stdout) says which requests it served.
 */
export async function startNpmRegistry(): Promise<NpmRegistry> {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-npm-registry-'))
  mkdirSync(join(dir, 'storage'))
  writeFileSync(
    join(dir, 'config.yaml'),
    [
      'storage: ./storage',
      'auth:',
      '  htpasswd:',
      '    file: ./htpasswd',
      '    max_users: 10',
      'uplinks: {}',
      'packages:',
      "  '**':",
      '    access: $all',
      '    publish: $authenticated',
      'log: { type: stdout, format: json, level: http }',
      '',
    ].join('\n'),
  )
  const port = await freePort()
  const log: string[] = []
  const proc: Subprocess = Bun.spawn(
    [
      process.execPath,
      join(root, 'node_modules', 'verdaccio', 'bin', 'verdaccio'),
      '-c',
      join(dir, 'config.yaml'),
      '-l',
      `127.0.0.1:${port}`,
    ],
    {
      cwd: dir,
      stdout: 'pipe',
      stderr: 'pipe',
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir },
    },
  )
  void (async () => {
    const decoder = new TextDecoder()
    let tail = ''
    for await (const chunk of proc.stdout as ReadableStream<Uint8Array>) {
      tail += decoder.decode(chunk, { stream: true })
      const lines = tail.split('\n')
      tail = lines.pop()!
      log.push(...lines)
    }
  })()
  void new Response(proc.stderr as ReadableStream<Uint8Array>).text()
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 30_000
  for (;;) {
    const up = await fetch(`${url}/-/ping`).then(
      (r) => r.ok,
      () => false,
    )
    if (up) break
    if (Date.now() > deadline || proc.exitCode !== null) throw new Error(`verdaccio did not start: ${log.slice(-5).join('\n')}`)
    await Bun.sleep(100)
  }
  // A user for publishing (the registry's own user API, as `npm adduser` uses it).
  const added = await fetch(`${url}/-/user/org.couchdb.user:agentd`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'agentd', password: 'agentd-test-password', email: 'agentd@test.invalid', type: 'user' }),
  })
  if (!added.ok) throw new Error(`verdaccio refused the user: ${added.status} ${await added.text()}`)
  const token = ((await added.json()) as { token: string }).token
  const npmrc = join(dir, 'npmrc')
  writeFileSync(npmrc, `registry=${url}/\n//127.0.0.1:${port}/:_authToken=${token}\naudit=false\nfund=false\nupdate-notifier=false\n`)
  const npm = async (cwd: string, args: string[]) => {
    const run = Bun.spawn(['npm', ...args], {
      cwd,
      stdout: 'pipe',
      stderr: 'pipe',
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: dir, npm_config_userconfig: npmrc, npm_config_cache: join(dir, 'cache') },
    })
    const [out, err, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited])
    if (code !== 0) throw new Error(`npm ${args.join(' ')} exited ${code}: ${err || out}`)
  }
  let packages = 0
  return {
    url,
    port,
    requests: () =>
      log.flatMap((line) => {
        try {
          const entry = JSON.parse(line) as { request?: { method?: string; url?: string } }
          return entry.request?.url ? [`${entry.request.method} ${entry.request.url}`] : []
        } catch {
          return []
        }
      }),
    async publish(name, version, files) {
      const pkg = join(dir, `package-${packages++}`)
      mkdirSync(pkg)
      writeFileSync(join(pkg, 'package.json'), JSON.stringify({ name, version, main: 'index.js', license: 'MIT' }))
      for (const [path, content] of Object.entries(files)) writeFileSync(join(pkg, path), content)
      await npm(pkg, ['publish'])
    },
    async lockfile(dependencies, registryHost) {
      const project = join(dir, `project-${packages++}`)
      mkdirSync(project)
      writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'fixture', version: '1.0.0', private: true, dependencies }))
      await npm(project, ['install', '--package-lock-only', '--ignore-scripts'])
      return readFileSync(join(project, 'package-lock.json'), 'utf8').replaceAll(`127.0.0.1:${port}`, registryHost)
    },
    async stop() {
      proc.kill('SIGKILL')
      await proc.exited
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const port = (server.address() as { port: number }).port
      server.close(() => resolve(port))
    })
  })
}
