import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import type { SessionRow } from '../session-record/store'
import { cloneInSandbox, pushChanges, writeGitConfig } from './clone'
import { remoteHead } from './remote-head'
import type { CodeHost, Repository } from './code-host'
import type { InstallationService, RunRepositoryScope } from './installations'
import type { RepositoryAccess } from './run-access'

type RunRow = Pick<SessionRow, 'id' | 'repoOwner' | 'repoName' | 'githubInstallation'>

/**
 * A run's repository, end to end, with a GitHub App: the create's checks, the checkout, git's
 * credential at the gateway, and a turn's changes pushed to a branch with a pull request. Every
 * code host call uses an installation token of the run's installation scoped to its one
 * repository; none of them enters the sandbox.
 */
export class RepositoryRuns implements RepositoryAccess {
  constructor(
    private readonly github: CodeHost,
    private readonly installations: InstallationService,
    /** Where the code host serves git (`<base>/<owner>/<name>.git`). */
    private readonly gitUrl: string,
    private readonly driver: SandboxDriver,
  ) {}

  /** The repository a run works on and may reach: one it was created with an installation for. */
  static repositoryOf(row: Pick<RunRow, 'repoOwner' | 'repoName' | 'githubInstallation'>): Repository | null {
    return row.githubInstallation !== null && row.repoOwner && row.repoName ? { owner: row.repoOwner, name: row.repoName } : null
  }

  forRun(orgId: string, repository: Repository, scope: RunRepositoryScope): Promise<string> {
    return this.installations.forRun(orgId, repository, scope)
  }

  async openHead(link: string, repository: Repository, number: number): Promise<string | null> {
    const installation = this.installations.installationId(link)
    return installation === null ? null : this.github.openHead(installation, repository, number)
  }

  /** git's credential for the run's repository, as the gateway puts it on (null: the installation is gone). */
  token(row: RunRow): Promise<string | null> {
    const repository = RepositoryRuns.repositoryOf(row)
    return repository ? this.installations.token(row.githubInstallation, repository) : Promise.resolve(null)
  }

  /** Before each turn: git's config in the sandbox's home, pointing at the gateway with the turn's key. */
  beforeTurn(row: RunRow, handle: SandboxHandle, key: string): void {
    if (RepositoryRuns.repositoryOf(row)) writeGitConfig(handle, key, this.gitUrl)
  }

  /** Before the first turn: the checkout, on `on_pr`'s branch, base_branch, or the default branch. */
  async checkout(row: RunRow & Pick<SessionRow, 'onPr' | 'baseBranch'>, handle: SandboxHandle): Promise<void> {
    const repository = RepositoryRuns.repositoryOf(row)
    if (repository)
      await cloneInSandbox(
        this.driver,
        handle,
        repository,
        this.gitUrl,
        row.onPr !== null ? await this.pullHead(row, repository, row.onPr) : row.baseBranch,
      )
  }

  /**
   * The commit the first turn's checkout will get (`<branch>@<sha>`), asked of the code host before
   * the sandbox exists: a prebuilt image's key. Null for a run without a repository.
   */
  async headCommit(row: RunRow & Pick<SessionRow, 'onPr' | 'baseBranch'>): Promise<string | null> {
    const repository = RepositoryRuns.repositoryOf(row)
    if (!repository) return null
    const branch = row.onPr !== null ? await this.pullHead(row, repository, row.onPr) : row.baseBranch
    return remoteHead(this.gitUrl, repository, await this.token(row), branch)
  }

  /**
   * The one branch git in the session's sandbox may push (the git proxy refuses every other ref):
   * its `on_pr` pull request's, or `agentd/<first 8 characters of its id>`. Null without a repository.
   */
  async branchOf(row: RunRow & Pick<SessionRow, 'onPr'>): Promise<string | null> {
    const repository = RepositoryRuns.repositoryOf(row)
    if (!repository) return null
    return row.onPr !== null ? this.pullHead(row, repository, row.onPr) : `agentd/${row.id.slice(0, 8)}`
  }

  /**
   * After a turn with changes: pushed to the session's branch (or its pull request's), and a pull
   * request opened; with the number of files the branch changes (the session's `files_produced`).
   * Null without a repository. git pushes with the turn's gateway key and is killed when
   * `turn.signal` (the turn's deadline) aborts.
   */
  async publish(
    row: RunRow & Pick<SessionRow, 'onPr' | 'title'>,
    handle: SandboxHandle,
    turn: { token: string; signal?: AbortSignal },
  ): Promise<{ files: number | null; pull: { branch: string; prUrl: string } | null } | null> {
    const repository = RepositoryRuns.repositoryOf(row)
    const installation = this.installations.installationId(row.githubInstallation)
    if (!repository) return null
    if (installation === null) throw new Error("the repository's GitHub App installation is no longer linked to the org")
    const branch = (await this.branchOf(row))!
    const url = `${this.gitUrl}/${repository.owner}/${repository.name}.git`
    const pushed = await pushChanges(this.driver, handle, {
      url,
      remoteBase: this.gitUrl,
      token: turn.token,
      branch,
      message: `agentd: ${row.title}`,
      ...(turn.signal ? { signal: turn.signal } : {}),
    })
    const { base } = pushed
    // A run on a pull request (on_pr) adds to it: its files are the pull request's, as the code
    // host lists them (in the sandbox its base is the pull request's own branch, which each push moves).
    const files = row.onPr === null ? pushed.files : await this.pullFileCount(row, row.onPr)
    if (base === null) return { files, pull: null }
    const pull = await this.github.openFor(installation, repository, {
      head: branch,
      base,
      title: row.title,
      body: `Changes of agentd run ${row.id}.`,
    })
    return { files, pull: { branch, prUrl: pull.url } }
  }

  /** The files of a run's pull request; null when its installation is no longer linked. */
  files(row: RunRow, number: number) {
    const repository = RepositoryRuns.repositoryOf(row)
    const installation = this.installations.installationId(row.githubInstallation)
    return repository && installation !== null ? this.github.files(installation, repository, number) : null
  }

  /** How many files the pull request changes, or null when the code host cannot say. */
  private async pullFileCount(row: RunRow, number: number): Promise<number | null> {
    try {
      return (await this.files(row, number))?.length ?? null
    } catch {
      return null
    }
  }

  /** The branch of an open pull request of the repository; throws when it is not open (any more). */
  private async pullHead(row: RunRow, repository: Repository, number: number): Promise<string> {
    const head = row.githubInstallation === null ? null : await this.openHead(row.githubInstallation, repository, number)
    if (!head) throw new Error(`pull request #${number} of ${repository.owner}/${repository.name} is not open`)
    return head
  }
}
