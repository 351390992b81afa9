import { ApiError } from '../domain/errors'

/** The branch of a repository's open pull request, or null when it is not open (GithubPulls.openHead). */
export type OpenPullHead = (repository: { owner: string; name: string }, number: number) => Promise<string | null>

/**
 * A Project run `on_pr` continues an open pull request of the Project's repository: 409 at create
 * when it is not open. Nothing is asked when agentd has no code host credential (no checkout then).
 */
export async function assertPullOpen(openPullHead: OpenPullHead | undefined, project: { repoOwner: string | null; repoName: string | null } | null, onPr: number | null): Promise<void> {
  if (onPr === null || !project?.repoOwner || !project.repoName || !openPullHead) return
  if (!(await openPullHead({ owner: project.repoOwner, name: project.repoName }, onPr))) {
    throw new ApiError('conflict', `on_pr: pull request #${onPr} of ${project.repoOwner}/${project.repoName} is not open`)
  }
}
