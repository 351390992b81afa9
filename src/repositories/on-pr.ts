import { ApiError } from '../domain/errors'

/** The branch of a repository's open pull request, or null when it is not open (GithubPulls.openHead). */
export type OpenPullHead = (repository: { owner: string; name: string }, number: number) => Promise<string | null>

/**
 * A run `on_pr` continues an open pull request of its repository (its Project's, or the one its
 * `resources` name): 409 at create
 * when it is not open. Nothing is asked when agentd has no code host credential (no checkout then).
 */
export async function assertPullOpen(openPullHead: OpenPullHead | undefined, repository: { owner: string; name: string } | null, onPr: number | null): Promise<void> {
  if (onPr === null || !repository || !openPullHead) return
  if (!(await openPullHead(repository, onPr))) throw new ApiError('conflict', `on_pr: pull request #${onPr} of ${repository.owner}/${repository.name} is not open`)
}
