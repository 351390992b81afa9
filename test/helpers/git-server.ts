import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export interface GitServer {
  /** Base URL: a repository `owner/name` is at `${url}/owner/name.git`. */
  url: string
  /** Where the bare repositories are. */
  root: string
  /** Makes a bare repository `owner/name` with one commit on `main` holding `files`. */
  repo(owner: string, name: string, files: Record<string, string>): void
  /** Adds a commit on `main` of `owner/name` writing `files` over what is there; returns its sha. */
  commit(owner: string, name: string, files: Record<string, string>): string
  /** The Authorization header of every request. */
  authorizations: string[]
  stop(): void
}

/**
 * A code host's git side, the real protocol: Debian's `git http-backend` (smart HTTP, clone and
 * push) as a CGI behind Bun.serve, over bare repositories in a temp folder. Every request must
 * carry `x-access-token:<token>` as basic auth, as GitHub takes an installation token, and
 * `allows(token, owner, name)` must say that token reaches that repository (GitHub's scoping).
 */
export function startGitServer(allows: (token: string, owner: string, name: string) => boolean): GitServer {
  const root = mkdtempSync(join(tmpdir(), 'agentd-git-'))
  const authorizations: string[] = []
  const granted = (authorization: string, path: string) => {
    const basic = /^Basic (.+)$/.exec(authorization)
    const [user, token] = basic ? Buffer.from(basic[1]!, 'base64').toString().split(':') : []
    const repository = /^\/([^/]+)\/([^/]+)\.git\//.exec(path)
    return user === 'x-access-token' && token !== undefined && repository !== null && allows(token, repository[1]!, repository[2]!)
  }
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(request) {
      const url = new URL(request.url)
      const authorization = request.headers.get('authorization') ?? ''
      authorizations.push(authorization)
      if (!granted(authorization, decodeURIComponent(url.pathname)))
        return new Response('Authentication required', { status: 401, headers: { 'www-authenticate': 'Basic realm="git"' } })
      const cgi = Bun.spawn(['git', 'http-backend'], {
        env: {
          PATH: process.env.PATH ?? '/usr/bin:/bin',
          GIT_PROJECT_ROOT: root,
          GIT_HTTP_EXPORT_ALL: '1',
          // Pushes are taken from whoever got through the token check above.
          REMOTE_USER: 'x-access-token',
          GATEWAY_INTERFACE: 'CGI/1.1',
          REQUEST_METHOD: request.method,
          PATH_INFO: decodeURIComponent(url.pathname),
          QUERY_STRING: url.search.slice(1),
          CONTENT_TYPE: request.headers.get('content-type') ?? '',
          ...(request.headers.get('content-encoding') ? { HTTP_CONTENT_ENCODING: request.headers.get('content-encoding')! } : {}),
          ...(request.headers.get('git-protocol') ? { GIT_PROTOCOL: request.headers.get('git-protocol')! } : {}),
        },
        stdin: request.body ? new Uint8Array(await request.arrayBuffer()) : 'ignore',
        stdout: 'pipe',
        stderr: 'pipe',
      })
      const out = new Uint8Array(await new Response(cgi.stdout).arrayBuffer())
      await cgi.exited
      // CGI: headers, a blank line, the body.
      let split = -1
      for (let i = 0; i + 3 < out.length; i++) {
        if (out[i] === 13 && out[i + 1] === 10 && out[i + 2] === 13 && out[i + 3] === 10) {
          split = i
          break
        }
      }
      if (split < 0) return new Response(`git http-backend: ${await new Response(cgi.stderr).text()}`, { status: 500 })
      const headers = new Headers()
      let status = 200
      for (const line of new TextDecoder().decode(out.subarray(0, split)).split('\r\n')) {
        const colon = line.indexOf(':')
        if (colon < 0) continue
        const name = line.slice(0, colon).trim()
        const value = line.slice(colon + 1).trim()
        if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10)
        else headers.append(name, value)
      }
      return new Response(out.subarray(split + 4), { status, headers })
    },
  })
  const git = (cwd: string, ...args: string[]) => {
    const run = Bun.spawnSync(['git', ...args], {
      cwd,
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: root,
        GIT_AUTHOR_NAME: 'ada',
        GIT_AUTHOR_EMAIL: 'ada@acme.test',
        GIT_COMMITTER_NAME: 'ada',
        GIT_COMMITTER_EMAIL: 'ada@acme.test',
      },
    })
    if (run.exitCode !== 0) throw new Error(`git ${args.join(' ')}: ${run.stderr.toString()}`)
  }
  const write = (work: string, files: Record<string, string>) => {
    for (const [path, content] of Object.entries(files))
      Bun.spawnSync(['sh', '-c', 'mkdir -p "$(dirname "$1")" && printf %s "$2" > "$1"', 'sh', join(work, path), content])
  }
  return {
    url: `http://127.0.0.1:${server.port}`,
    root,
    authorizations,
    repo(owner, name, files) {
      const bare = join(root, owner, `${name}.git`)
      const work = mkdtempSync(join(tmpdir(), 'agentd-git-work-'))
      try {
        git(root, 'init', '--bare', '-b', 'main', bare)
        git(work, 'init', '-b', 'main')
        write(work, files)
        git(work, 'add', '-A')
        git(work, 'commit', '-m', 'first')
        git(work, 'push', bare, 'main')
      } finally {
        rmSync(work, { recursive: true, force: true })
      }
    },
    commit(owner, name, files) {
      const bare = join(root, owner, `${name}.git`)
      const work = mkdtempSync(join(tmpdir(), 'agentd-git-work-'))
      try {
        git(work, 'clone', '-q', '-b', 'main', bare, '.')
        write(work, files)
        git(work, 'add', '-A')
        git(work, 'commit', '-m', 'next')
        git(work, 'push', '-q', 'origin', 'main')
        return Bun.spawnSync(['git', 'rev-parse', 'HEAD'], { cwd: work }).stdout.toString().trim()
      } finally {
        rmSync(work, { recursive: true, force: true })
      }
    },
    stop() {
      server.stop(true)
      rmSync(root, { recursive: true, force: true })
    },
  }
}
