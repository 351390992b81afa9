/**
 * `agentd secrets …` and `agentd env …`: a Project's secrets and environment (org admins). A secret's
 * value is read from stdin by default, so it is never in the process list or the shell's history;
 * `--value` is there for scripts that accept that.
 */
import { readFileSync } from 'node:fs'
import type { AgentdClient } from '../typescript/index'

/** Bad usage of the command line (exit 2). */
export class UsageError extends Error {}

export interface EnvOptions {
  value?: string
  setupFile?: string
  setupTimeout?: string
  allow?: string
  json: boolean
}

type Out = (line: string) => void

export const ENV_HELP = `  secrets set <project> <NAME>
                          make or replace a Project secret (admins); its value is read from stdin
                          (one trailing newline dropped), or given with --value
  secrets list <project>  the Project's secret names (never their values)
  secrets rm <project> <NAME>
                          remove a Project secret
  env show <project>      the Project's environment: setup script, its time limit, network.allow
  env set <project>       change what the options name and keep the rest: --setup-file <file> (- for
                          stdin; an empty file removes the setup), --setup-timeout <seconds>,
                          --allow <host>[,<host>…] (registries, *.domain, host:port; '' for none)`

/** Reads a whole stream of text (stdin), told to the person at a terminal. */
async function readStdin(prompt: string): Promise<string> {
  if (process.stdin.isTTY) process.stderr.write(`${prompt} (end with Ctrl-D): `)
  return Bun.stdin.text()
}

const dropNewline = (text: string) => text.replace(/\r?\n$/, '')

export async function secretsCommand(
  api: AgentdClient,
  org: string,
  args: string[],
  opts: EnvOptions,
  out: Out,
  refused: (error: unknown) => number,
): Promise<number> {
  const [action, project, name] = args
  if (!project) throw new UsageError(`secrets ${action ?? '<set|list|rm>'} needs a Project`)
  const path = { org, project }
  switch (action) {
    case 'set': {
      if (!name) throw new UsageError('secrets set needs a Project and a NAME')
      const value = opts.value ?? dropNewline(await readStdin(`value of ${name}`))
      const { response, error } = await api.PUT('/o/{org}/projects/{project}/secrets/{name}', {
        params: { path: { ...path, name } },
        body: { value },
      })
      if (!response.ok) return refused(error)
      out(`set ${name}`)
      return 0
    }
    case 'list': {
      const { data, error } = await api.GET('/o/{org}/projects/{project}/secrets', { params: { path } })
      if (!data) return refused(error)
      if (opts.json) out(JSON.stringify(data))
      else for (const secret of data.data) out(`${secret.name} ${secret.updated_at}`)
      return 0
    }
    case 'rm': {
      if (!name) throw new UsageError('secrets rm needs a Project and a NAME')
      const { response, error } = await api.DELETE('/o/{org}/projects/{project}/secrets/{name}', { params: { path: { ...path, name } } })
      if (!response.ok) return refused(error)
      out(`removed ${name}`)
      return 0
    }
    default:
      throw new UsageError(`secrets ${action ?? ''}: the actions are set, list and rm`)
  }
}

export async function envCommand(
  api: AgentdClient,
  org: string,
  args: string[],
  opts: EnvOptions,
  out: Out,
  refused: (error: unknown) => number,
): Promise<number> {
  const [action, project] = args
  if (!project) throw new UsageError(`env ${action ?? '<show|set>'} needs a Project`)
  const path = { org, project }
  const current = await api.GET('/o/{org}/projects/{project}/environment', { params: { path } })
  if (!current.data) return refused(current.error)
  let environment = current.data
  if (action === 'set') {
    // The API replaces the environment whole; the CLI changes only what its options name.
    const timeout = opts.setupTimeout === undefined ? environment.setup_timeout_s : Number(opts.setupTimeout)
    if (!Number.isInteger(timeout)) throw new UsageError('--setup-timeout is a whole number of seconds')
    let setup = environment.setup
    if (opts.setupFile !== undefined) {
      const text = opts.setupFile === '-' ? await readStdin('setup script') : readFileSync(opts.setupFile, 'utf8')
      setup = text === '' ? null : text
    }
    const allow =
      opts.allow === undefined
        ? environment.network.allow
        : opts.allow
            .split(',')
            .map((entry) => entry.trim())
            .filter((entry) => entry !== '')
    const put = await api.PUT('/o/{org}/projects/{project}/environment', {
      params: { path },
      body: { setup, setup_timeout_s: timeout, network: { allow } },
    })
    if (!put.data) return refused(put.error)
    environment = put.data
  } else if (action !== 'show') throw new UsageError(`env ${action ?? ''}: the actions are show and set`)
  if (opts.json) {
    out(JSON.stringify(environment))
    return 0
  }
  out(`revision ${environment.revision}${environment.updated_at ? ` (updated ${environment.updated_at})` : ' (never set)'}`)
  out(`setup_timeout_s ${environment.setup_timeout_s}`)
  out(`allow ${environment.network.allow.length > 0 ? environment.network.allow.join(', ') : '(none: no network)'}`)
  if (environment.setup === null) out('setup (none)')
  else out(`setup:\n${environment.setup.replace(/\n$/, '')}`)
  return 0
}
