import { createAppAuth } from '@octokit/auth-app'
import { Octokit } from '@octokit/rest'
import type { ChangedFile, CodeHost, Installation, Repository } from './code-host'

/** What a run asks of its repository's installation: read and push code, open pull requests; nothing else. */
const PERMISSIONS = { contents: 'write', pull_requests: 'write', metadata: 'read' } as const

/** Octokit's own request log (a line per failed request, to the console) is off: what fails is thrown, and said where it matters. */
const quiet = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} }
const OPTIONS = { userAgent: 'agentd', request: { timeout: 10_000 }, log: quiet }

const missing = (err: unknown) => (err as { status?: number }).status === 404

/**
 * The code host: GitHub's REST API through Octokit as a GitHub App (its base URL configurable:
 * GitHub Enterprise, or a test stand-in). The App's key signs the JWT that asks about
 * installations; a run's requests use an installation token scoped to its one repository, minted
 * and cached (until it expires) by `@octokit/auth-app`. No token leaves agentd.
 */
export class GithubApp implements CodeHost {
  private readonly app: Octokit

  constructor(
    private readonly baseUrl: string,
    credentials: { appId: string; privateKey: string },
  ) {
    this.app = new Octokit({ ...OPTIONS, authStrategy: createAppAuth, auth: credentials, baseUrl })
  }

  /** The installation with GitHub's id `id`, or null when there is none (or not of this App). */
  async installation(id: number): Promise<Installation | null> {
    try {
      return installationOf((await this.app.rest.apps.getInstallation({ installation_id: id })).data)
    } catch (err) {
      if (missing(err)) return null
      throw err
    }
  }

  /** The installation of this App that covers `repository`, or null when none does. */
  async installationFor(repository: Repository): Promise<Installation | null> {
    try {
      return installationOf((await this.app.rest.apps.getRepoInstallation({ owner: repository.owner, repo: repository.name })).data)
    } catch (err) {
      if (missing(err)) return null
      throw err
    }
  }

  /** An installation token for `repository` alone (git's credential, put on by the gateway). */
  async token(installationId: number, repository: Repository): Promise<string> {
    const auth = (await this.app.auth({
      type: 'installation',
      installationId,
      repositoryNames: [repository.name],
      permissions: PERMISSIONS,
    })) as { token: string }
    return auth.token
  }

  private async as(installationId: number, repository: Repository): Promise<Octokit> {
    return new Octokit({ ...OPTIONS, auth: await this.token(installationId, repository), baseUrl: this.baseUrl })
  }

  /** The open pull request of `head` into `base`, opened now if there is none: its page and number. */
  async openFor(
    installationId: number,
    repository: Repository,
    pull: { head: string; base: string; title: string; body: string },
  ): Promise<{ url: string; number: number }> {
    const octokit = await this.as(installationId, repository)
    const { owner, name: repo } = repository
    const open = await octokit.rest.pulls.list({ owner, repo, head: `${owner}:${pull.head}`, state: 'open', per_page: 1 })
    const found =
      open.data[0] ??
      (await octokit.rest.pulls.create({ owner, repo, head: pull.head, base: pull.base, title: pull.title, body: pull.body })).data
    return { url: found.html_url, number: found.number }
  }

  /** The pull request's branch if it is open (in the repository itself, not a fork), else null. */
  async openHead(installationId: number, repository: Repository, number: number): Promise<string | null> {
    const octokit = await this.as(installationId, repository)
    try {
      const pull = (await octokit.rest.pulls.get({ owner: repository.owner, repo: repository.name, pull_number: number })).data
      const own =
        pull.head.repo?.full_name === undefined ||
        pull.head.repo.full_name.toLowerCase() === `${repository.owner}/${repository.name}`.toLowerCase()
      return pull.state === 'open' && own ? pull.head.ref : null
    } catch (err) {
      if (missing(err)) return null
      throw err
    }
  }

  /** Every file the pull request changed (GitHub lists at most 3000). */
  async files(installationId: number, repository: Repository, number: number): Promise<ChangedFile[]> {
    const octokit = await this.as(installationId, repository)
    const files = await octokit.paginate(octokit.rest.pulls.listFiles, {
      owner: repository.owner,
      repo: repository.name,
      pull_number: number,
      per_page: 100,
    })
    return files.map((f) => ({
      filename: f.filename,
      status: f.status,
      additions: f.additions,
      deletions: f.deletions,
      changes: f.changes,
      ...(f.patch !== undefined ? { patch: f.patch } : {}),
    }))
  }
}

function installationOf(data: { id: number; account: unknown; suspended_at: string | null }): Installation {
  const account = data.account as { login?: string; slug?: string } | null
  return { id: data.id, account: account?.login ?? account?.slug ?? '', suspended: data.suspended_at !== null }
}
