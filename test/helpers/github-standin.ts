import Ajv, { type ValidateFunction } from 'ajv'
import { randomBytes } from 'node:crypto'
import { join } from 'node:path'
import { importSPKI, jwtVerify } from 'jose'
import type { GitServer } from './git-server'

/**
 * A local, stateful stand-in for the part of GitHub's REST API agentd uses: a GitHub App's
 * installations (looked up with the App's JWT, RS256 under its key, checked as GitHub does),
 * installation tokens scoped to named repositories, pull requests (list by head, create, update)
 * and a pull request's files, computed with git from the bare repositories of a `GitServer`. A
 * token reaches only its installation's repositories it was scoped to, here and at the git server
 * (`allows`). Every answer is checked against GitHub's own OpenAPI description
 * (`@octokit/openapi`) before it is sent: an answer that does not match it throws, so the stand-in
 * cannot drift from the real API. Answers are made from the description's own schemas: the
 * required fields a test does not care about get placeholder values of their declared types.
 */

const DESCRIPTION = join(import.meta.dir, '../../node_modules/@octokit/openapi/generated/api.github.com.json')

interface Schema {
  $ref?: string
  type?: string
  nullable?: boolean
  enum?: unknown[]
  properties?: Record<string, Schema>
  required?: string[]
  items?: Schema
  allOf?: Schema[]
  anyOf?: Schema[]
  oneOf?: Schema[]
  format?: string
}

export interface PullRecord {
  number: number
  title: string
  body: string | null
  head: string
  base: string
  state: 'open' | 'closed'
}

/** An installation of the App: the account it is on, the repositories it covers (`owner/name`). */
export interface InstallationRecord {
  account: string
  repositories: string[]
  suspended: boolean
}

export interface GithubStandin {
  url: string
  /** The App's installations by GitHub's id; a test adds, changes or suspends them. */
  installations: Map<number, InstallationRecord>
  /** Every installation token issued, with the repositories (names) it was scoped to. */
  tokens: Map<string, { installation: number; repositories: string[] }>
  /** True when `token` (an issued installation token) reaches `owner/name`. */
  allows(token: string, owner: string, name: string): boolean
  /** Pull requests by `owner/name`; a test may close one (`state`). */
  pulls: Map<string, PullRecord[]>
  /** Requests as `METHOD path`, and their Authorization headers. */
  requests: { route: string; authorization: string }[]
  /** While true every request is a 503 (the code host is down). */
  down: boolean
  stop(): void
}

export async function startGithubStandin(git: GitServer, app: { appId: string; publicKey: string }): Promise<GithubStandin> {
  const doc = (await Bun.file(DESCRIPTION).json()) as {
    paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema: Schema }> }> }>>
    components: { schemas: Record<string, Schema> }
  }
  const ajv = new Ajv({ strict: false, validateFormats: false, allErrors: true })
  ajv.addSchema({ $id: 'github', components: openApiNullables(doc.components) })
  const validators = new Map<string, ValidateFunction>()
  const schemaOf = (path: string, method: string, status: string): Schema =>
    doc.paths[path]![method]!.responses[status]!.content!['application/json']!.schema
  const check = (path: string, method: string, status: string, body: unknown) => {
    const key = `${method} ${path} ${status}`
    let validate = validators.get(key)
    if (!validate) {
      validate = ajv.compile(
        JSON.parse(JSON.stringify(schemaOf(path, method, status)).replaceAll('"#/components/', '"github#/components/')),
      )
      validators.set(key, validate)
    }
    if (!validate(body)) throw new Error(`the stand-in's answer to ${key} is not GitHub's: ${ajv.errorsText(validate.errors)}`)
    return body
  }
  const resolve = (schema: Schema): Schema => (schema.$ref ? resolve(doc.components.schemas[schema.$ref.split('/').pop()!]!) : schema)
  /** A value of `schema` with every required field, placeholders of their types. */
  const sample = (schema: Schema, depth = 0): unknown => {
    const s = resolve(schema)
    if (s.allOf) return Object.assign({}, ...s.allOf.map((part) => sample(part, depth)))
    if (s.anyOf || s.oneOf) return sample((s.anyOf ?? s.oneOf)![0]!, depth)
    if (s.nullable && depth > 0) return null
    if (s.enum) return s.enum[0]
    switch (s.type) {
      case 'object': {
        const out: Record<string, unknown> = {}
        for (const name of s.required ?? []) out[name] = sample(s.properties?.[name] ?? {}, depth + 1)
        return out
      }
      case 'array':
        return []
      case 'integer':
      case 'number':
        return 1
      case 'boolean':
        return false
      case 'string':
        return s.format === 'date-time' ? new Date(0).toISOString() : s.format === 'uri' ? 'https://github.example/x' : 'x'
      default:
        return {}
    }
  }
  const pulls = new Map<string, PullRecord[]>()
  const requests: GithubStandin['requests'] = []
  const state = { down: false }
  const installations = new Map<number, InstallationRecord>()
  const tokens: GithubStandin['tokens'] = new Map()
  const appKey = await importSPKI(app.publicKey, 'RS256')
  const notFound = () => Response.json({ message: 'Not Found', documentation_url: 'https://docs.github.com/rest' }, { status: 404 })
  const badCredentials = (message = 'Bad credentials') =>
    Response.json({ message, documentation_url: 'https://docs.github.com/rest' }, { status: 401 })
  const covers = (record: InstallationRecord | undefined, owner: string, name: string) =>
    record?.repositories.some((full) => full.toLowerCase() === `${owner}/${name}`.toLowerCase()) ?? false
  const allows = (token: string, owner: string, name: string) => {
    const issued = tokens.get(token)
    const record = issued && installations.get(issued.installation)
    return (
      !!issued &&
      !!record &&
      !record.suspended &&
      covers(record, owner, name) &&
      issued.repositories.some((r) => r.toLowerCase() === name.toLowerCase())
    )
  }
  /** GitHub's check of an App's JWT: RS256 under the App's key, `iss` the App, at most ten minutes long. */
  const isApp = async (authorization: string) => {
    const jwt = /^bearer (.+)$/i.exec(authorization)?.[1]
    if (!jwt) return false
    try {
      const { payload } = await jwtVerify(jwt, appKey, { algorithms: ['RS256'], clockTolerance: 60 })
      return (
        String(payload.iss) === app.appId &&
        typeof payload.exp === 'number' &&
        typeof payload.iat === 'number' &&
        payload.exp - payload.iat <= 660
      )
    } catch {
      return false
    }
  }
  const installationJson = (id: number, record: InstallationRecord) => {
    const body = sample(doc.components.schemas['installation']!) as Record<string, any>
    return {
      ...body,
      id,
      app_id: Number(app.appId),
      account: { ...(sample(doc.components.schemas['simple-user']!) as object), login: record.account },
      repository_selection: 'selected',
      suspended_at: record.suspended ? new Date().toISOString() : null,
    }
  }

  const pullJson = (base: string, owner: string, repo: string, pull: PullRecord, simple: boolean) => {
    const body = sample(doc.components.schemas[simple ? 'pull-request-simple' : 'pull-request']!) as Record<string, any>
    return {
      ...body,
      number: pull.number,
      title: pull.title,
      body: pull.body,
      state: pull.state,
      url: `${base}/repos/${owner}/${repo}/pulls/${pull.number}`,
      html_url: `https://github.example/${owner}/${repo}/pull/${pull.number}`,
      head: {
        ...body.head,
        ref: pull.head,
        label: `${owner}:${pull.head}`,
        repo: { ...body.head.repo, name: repo, full_name: `${owner}/${repo}` },
      },
      base: {
        ...body.base,
        ref: pull.base,
        label: `${owner}:${pull.base}`,
        repo: { ...body.base.repo, name: repo, full_name: `${owner}/${repo}` },
      },
    }
  }
  const gitIn = async (owner: string, repo: string, ...args: string[]) => {
    const run = Bun.spawn(['git', '--git-dir', join(git.root, owner, `${repo}.git`), ...args], { stdout: 'pipe', stderr: 'pipe' })
    const [out, code] = await Promise.all([new Response(run.stdout).text(), run.exited])
    if (code !== 0) throw new Error(`git ${args.join(' ')} failed`)
    return out
  }

  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(request) {
      const url = new URL(request.url)
      const base = `${url.origin}`
      requests.push({ route: `${request.method} ${url.pathname}`, authorization: request.headers.get('authorization') ?? '' })
      if (state.down) return Response.json({ message: 'Service Unavailable' }, { status: 503 })
      const authorization = request.headers.get('authorization') ?? ''
      // The App's own routes: its JWT, nothing else.
      let m =
        /^\/app\/installations\/(\d+)(\/access_tokens)?$/.exec(url.pathname) ??
        /^\/repos\/([^/]+)\/([^/]+)\/installation$/.exec(url.pathname)
      if (m) {
        if (!(await isApp(authorization))) return badCredentials('A JSON web token could not be decoded')
        if (url.pathname.endsWith('/installation')) {
          const found = [...installations].find(([, record]) => covers(record, m![1]!, m![2]!))
          return found ? Response.json(check('/repos/{owner}/{repo}/installation', 'get', '200', installationJson(...found))) : notFound()
        }
        const id = Number(m[1])
        const record = installations.get(id)
        if (!record) return notFound()
        if (!m[2] && request.method === 'GET')
          return Response.json(check('/app/installations/{installation_id}', 'get', '200', installationJson(id, record)))
        if (m[2] && request.method === 'POST') {
          if (record.suspended)
            return Response.json(
              { message: 'This installation has been suspended', documentation_url: 'https://docs.github.com/rest' },
              { status: 403 },
            )
          const input = (await request.json().catch(() => ({}))) as { repositories?: string[]; permissions?: Record<string, string> }
          const owned = record.repositories.map((full) => full.split('/')[1]!)
          const names = input.repositories ?? owned
          if (names.some((n) => !owned.some((o) => o.toLowerCase() === n.toLowerCase())))
            return Response.json(
              {
                message: 'There is at least one repository that does not exist or is not accessible to the parent installation.',
                documentation_url: 'https://docs.github.com/rest',
              },
              { status: 422 },
            )
          const token = `ghs_${randomBytes(18).toString('base64url')}`
          tokens.set(token, { installation: id, repositories: names })
          const body = sample(doc.components.schemas['installation-token']!) as Record<string, unknown>
          const answer = {
            ...body,
            token,
            expires_at: new Date(Date.now() + 3600_000).toISOString(),
            permissions: input.permissions ?? {},
            repository_selection: 'selected',
          }
          return Response.json(check('/app/installations/{installation_id}/access_tokens', 'post', '201', answer), { status: 201 })
        }
        return notFound()
      }
      const token = /^(?:token|bearer) (.+)$/i.exec(authorization)?.[1] ?? ''
      if (!tokens.has(token)) return badCredentials()
      m = /^\/repos\/([^/]+)\/([^/]+)\/pulls(?:\/|$)/.exec(url.pathname)
      // A repository the token does not reach is, as on GitHub, not there.
      if (m && !allows(token, m[1]!, m[2]!)) return notFound()
      m = /^\/repos\/([^/]+)\/([^/]+)\/pulls$/.exec(url.pathname)
      if (m) {
        const [owner, repo] = [m[1]!, m[2]!]
        const list = pulls.get(`${owner}/${repo}`) ?? []
        pulls.set(`${owner}/${repo}`, list)
        if (request.method === 'GET') {
          const head = url.searchParams.get('head')
          const wanted = url.searchParams.get('state') ?? 'open'
          const found = list.filter((p) => (head === null || `${owner}:${p.head}` === head) && (wanted === 'all' || p.state === wanted))
          return Response.json(
            check(
              '/repos/{owner}/{repo}/pulls',
              'get',
              '200',
              found.map((p) => pullJson(base, owner, repo, p, true)),
            ),
          )
        }
        if (request.method === 'POST') {
          const input = (await request.json()) as { title: string; body?: string; head: string; base: string }
          const pull: PullRecord = {
            number: list.length + 1,
            title: input.title,
            body: input.body ?? null,
            head: input.head,
            base: input.base,
            state: 'open',
          }
          list.push(pull)
          return Response.json(check('/repos/{owner}/{repo}/pulls', 'post', '201', pullJson(base, owner, repo, pull, false)), {
            status: 201,
          })
        }
      }
      m = /^\/repos\/([^/]+)\/([^/]+)\/pulls\/(\d+)(\/files)?$/.exec(url.pathname)
      if (m) {
        const [owner, repo, number, files] = [m[1]!, m[2]!, Number(m[3]), m[4]]
        const pull = pulls.get(`${owner}/${repo}`)?.find((p) => p.number === number)
        if (!pull) return Response.json({ message: 'Not Found', documentation_url: 'https://docs.github.com/rest' }, { status: 404 })
        if (files && request.method === 'GET') {
          // What GitHub computes: the head's changes against the merge base with the base branch.
          const numstat = await gitIn(owner, repo, 'diff', '--numstat', `${pull.base}...${pull.head}`)
          const statuses = await gitIn(owner, repo, 'diff', '--name-status', `${pull.base}...${pull.head}`)
          const entries = await Promise.all(
            numstat
              .trim()
              .split('\n')
              .filter(Boolean)
              .map(async (line, i) => {
                const [add, del, filename] = line.split('\t') as [string, string, string]
                const letter = statuses.trim().split('\n')[i]!.split('\t')[0]!
                const diff = (await gitIn(owner, repo, 'diff', `${pull.base}...${pull.head}`, '--', filename)).split('\n')
                const patch = diff
                  .slice(diff.findIndex((l) => l.startsWith('@@')))
                  .join('\n')
                  .trimEnd()
                const entry = sample(doc.components.schemas['diff-entry']!) as Record<string, unknown>
                return {
                  ...entry,
                  filename,
                  status: letter === 'A' ? 'added' : letter === 'D' ? 'removed' : 'modified',
                  additions: Number(add),
                  deletions: Number(del),
                  changes: Number(add) + Number(del),
                  patch,
                }
              }),
          )
          return Response.json(check('/repos/{owner}/{repo}/pulls/{pull_number}/files', 'get', '200', entries))
        }
        if (!files && request.method === 'GET')
          return Response.json(check('/repos/{owner}/{repo}/pulls/{pull_number}', 'get', '200', pullJson(base, owner, repo, pull, false)))
        if (request.method === 'PATCH') {
          const input = (await request.json()) as { title?: string; body?: string }
          if (input.title !== undefined) pull.title = input.title
          if (input.body !== undefined) pull.body = input.body
          return Response.json(check('/repos/{owner}/{repo}/pulls/{pull_number}', 'patch', '200', pullJson(base, owner, repo, pull, false)))
        }
      }
      return Response.json({ message: 'Not Found', documentation_url: 'https://docs.github.com/rest' }, { status: 404 })
    },
  })
  return {
    url: `http://127.0.0.1:${server.port}`,
    installations,
    tokens,
    allows,
    pulls,
    requests,
    get down() {
      return state.down
    },
    set down(value: boolean) {
      state.down = value
    },
    stop: () => server.stop(true),
  }
}

/**
 * OpenAPI 3.0's `nullable` beside `anyOf` (no `type`), which the description uses (an
 * installation's `account`), as JSON Schema says it: one more branch, `null`.
 */
function openApiNullables<T>(value: T): T {
  if (Array.isArray(value)) return value.map(openApiNullables) as T
  if (value === null || typeof value !== 'object') return value
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(value)) out[key] = openApiNullables(inner)
  if (out.nullable === true && out.type === undefined) {
    const { nullable: _, ...rest } = out
    return { anyOf: [rest, { type: 'null' }] } as T
  }
  return out as T
}
