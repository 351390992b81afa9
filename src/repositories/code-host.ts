/** One file a pull request changed, as the code host reports it. */
export interface ChangedFile {
  filename: string
  status: string
  additions: number
  deletions: number
  changes: number
  patch?: string
}

export interface Repository {
  owner: string
  name: string
}

/** A GitHub App installation as GitHub reports it. */
export interface Installation {
  id: number
  /** The account the App is installed on (a user's or organization's login, an enterprise's slug). */
  account: string
  suspended: boolean
}

/**
 * The code host as agentd uses it: an App's installations, tokens scoped to one repository, and
 * pull requests. GitHub (and GitHub Enterprise) is the one there is (GithubApp).
 */
export interface CodeHost {
  /** The installation with the code host's id `id`, or null when the App has none such. */
  installation(id: number): Promise<Installation | null>
  /** The App's installation that covers `repository`, or null when none does. */
  installationFor(repository: Repository): Promise<Installation | null>
  /** A token of installation `installationId` for `repository` alone. */
  token(installationId: number, repository: Repository): Promise<string>
  /** The open pull request of `head` into `base`, opened now if there is none. */
  openFor(
    installationId: number,
    repository: Repository,
    pull: { head: string; base: string; title: string; body: string },
  ): Promise<{ url: string; number: number }>
  /** The branch of pull request `number` when it is open (and not a fork's), else null. */
  openHead(installationId: number, repository: Repository, number: number): Promise<string | null>
  /** The files pull request `number` changed. */
  files(installationId: number, repository: Repository, number: number): Promise<ChangedFile[]>
}
