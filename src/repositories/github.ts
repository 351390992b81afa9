import { Octokit } from '@octokit/rest'

/** One file a pull request changed, as the code host reports it. */
export interface ChangedFile {
  filename: string
  status: string
  additions: number
  deletions: number
  changes: number
  patch?: string
}

/**
 * The code host's REST side, GitHub's API through Octokit (its base URL configurable: GitHub
 * Enterprise, or a test stand-in): pull requests of a repository and their files.
 */
export class GithubPulls {
  private readonly octokit: Octokit

  constructor(baseUrl: string, token: string) {
    this.octokit = new Octokit({ auth: token, baseUrl, userAgent: 'agentd', request: { timeout: 10_000 } })
  }

  /** The open pull request of `head` into `base`, opened now if there is none: its page and number. */
  async openFor(repository: { owner: string; name: string }, pull: { head: string; base: string; title: string; body: string }): Promise<{ url: string; number: number }> {
    const { owner, name: repo } = repository
    const open = await this.octokit.rest.pulls.list({ owner, repo, head: `${owner}:${pull.head}`, state: 'open', per_page: 1 })
    const found = open.data[0] ?? (await this.octokit.rest.pulls.create({ owner, repo, head: pull.head, base: pull.base, title: pull.title, body: pull.body })).data
    return { url: found.html_url, number: found.number }
  }

  /** The pull request's branch if it is open (in the repository itself, not a fork), else null. */
  async openHead(repository: { owner: string; name: string }, number: number): Promise<string | null> {
    try {
      const pull = (await this.octokit.rest.pulls.get({ owner: repository.owner, repo: repository.name, pull_number: number })).data
      const own = pull.head.repo?.full_name === undefined || pull.head.repo.full_name.toLowerCase() === `${repository.owner}/${repository.name}`.toLowerCase()
      return pull.state === 'open' && own ? pull.head.ref : null
    } catch (err) {
      if ((err as { status?: number }).status === 404) return null
      throw err
    }
  }

  /** Every file the pull request changed (GitHub lists at most 3000). */
  async files(repository: { owner: string; name: string }, number: number): Promise<ChangedFile[]> {
    const files = await this.octokit.paginate(this.octokit.rest.pulls.listFiles, { owner: repository.owner, repo: repository.name, pull_number: number, per_page: 100 })
    return files.map((f) => ({ filename: f.filename, status: f.status, additions: f.additions, deletions: f.deletions, changes: f.changes, ...(f.patch !== undefined ? { patch: f.patch } : {}) }))
  }
}
