import { join } from 'node:path'
import type { TestApp } from '../helpers/app'
import { startGithubApp, type GithubApp } from '../helpers/github-app'
import { settled } from '../helpers/sessions'
import { adminWith } from '../helpers/server'
import { caller, script, securityApp, whereItIs, type IsolatingKind } from './helpers'

/**
 * Runs of a Project with a repository, for the attacks on git through agentd: a GitHub App
 * stand-in, its git server (Debian's `git http-backend`) holding `acme/app`, and an agentd on a
 * real sandbox driver whose org links the App's installation and has Project `app` on `acme/app`.
 */
export const INSTALLATION = 101

/** The code host, with `acme/app` (one commit on main holding `files`) installed for org acme. */
export async function codeHost(files: Record<string, string> = { 'README.md': 'hello from the repository\n' }): Promise<GithubApp> {
  const host = await startGithubApp()
  host.git.repo('acme', 'app', files)
  host.github.installations.set(INSTALLATION, { account: 'acme', repositories: ['acme/app'], suspended: false })
  return host
}

/** An agentd on `kind` for `host`'s App, its installation linked to acme, Project `app` on acme/app. */
export async function repositoryApp(kind: IsolatingKind, host: GithubApp, env: Record<string, string> = {}): Promise<TestApp> {
  const t = await securityApp(kind, { ...host.env, ...env })
  const linked = await adminWith(host.env, t.dir, 'github', 'link', '--org', 'acme', '--installation', String(INSTALLATION))
  if (linked.code !== 0) throw new Error(`link failed: ${linked.stderr}`)
  t.identity.createProject('acme', 'app', 'acme/app')
  return t
}

/** Starts a run of Project app whose first turn runs `steps`; its id. */
export async function startRun(t: TestApp, steps: unknown[]): Promise<string> {
  const created = await caller(t)('POST', '/o/acme/p/app/sessions', { agent: 'harness_1', prompt: script(steps) })
  if (created.status !== 202) throw new Error(`create failed: ${created.status} ${JSON.stringify(created.body)}`)
  return created.body.execution_id as string
}

/** Waits until run `id` has `turns` turns and is not in progress; its view. */
export function runEnded(t: TestApp, id: string, turns = 1, timeoutMs = 90_000): Promise<any> {
  return settled(async () => (await caller(t)('GET', `/o/acme/p/app/sessions/${id}`)).body, {
    turns,
    timeoutMs,
    explain: () => whereItIs(t, id),
  })
}

/** What the run's tool calls printed, in order. */
export function toolOutputs(t: TestApp, id: string): string[] {
  return t.store
    .allEvents(id)
    .filter((e) => e.type === 'tool_result')
    .map((e) => String(e.data.output ?? ''))
}

/** The code host's refs of acme/app (`refs/heads/main` → sha), read from its bare repository. */
export function hostRefs(host: GithubApp): Map<string, string> {
  const run = Bun.spawnSync([
    'git',
    '--git-dir',
    join(host.git.root, 'acme', 'app.git'),
    'for-each-ref',
    '--format=%(refname) %(objectname)',
  ])
  return new Map(
    run.stdout
      .toString()
      .trim()
      .split('\n')
      .filter(Boolean)
      .map((line) => line.split(' ') as [string, string]),
  )
}

/** Runs git in the code host's bare repository of acme/app (to set up branches and tags). */
export function hostGit(host: GithubApp, ...args: string[]): string {
  const run = Bun.spawnSync(['git', '--git-dir', join(host.git.root, 'acme', 'app.git'), ...args], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', GIT_COMMITTER_NAME: 'ada', GIT_COMMITTER_EMAIL: 'ada@acme.test' },
  })
  if (run.exitCode !== 0) throw new Error(`git ${args.join(' ')}: ${run.stderr.toString()}`)
  return run.stdout.toString().trim()
}
