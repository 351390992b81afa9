import { ApiError, conflict } from '../domain/errors'
import type { Repository } from './code-host'
import type { RunRepositoryScope } from './installations'

/** What a create asks of the code host about its run's repository (RepositoryRuns); absent without a GitHub App. */
export interface RepositoryAccess {
  /** The installation (its link id) the run goes through; throws the spec's 403, 409 or 422. */
  forRun(orgId: string, repository: Repository, scope: RunRepositoryScope): Promise<string>
  /** The branch of the repository's pull request `number` when it is open, else null. */
  openHead(link: string, repository: Repository, number: number): Promise<string | null>
}

/**
 * A new run's repository (its Project's, or the one its `resources` name), checked before anything
 * is stored: an installation of the org covers it, and a run `on_pr` continues an open pull request
 * (409 when it is not open). Resolves to the installation's link id; null when the run has no
 * repository. Without a GitHub App no installation can be linked, so a Project bound to a
 * repository answers 403 INSTALLATION_NOT_LINKED (spec 4.1) rather than run without its checkout.
 */
export async function checkRunRepository(
  access: RepositoryAccess | undefined,
  orgId: string,
  repository: Repository | null,
  scope: RunRepositoryScope,
  onPr: number | null,
): Promise<string | null> {
  if (!repository) return null
  if (!access) {
    const whose = scope.project ? `Project ${scope.project.name}` : 'this run'
    throw new ApiError(
      'forbidden',
      `${whose} is bound to ${repository.owner}/${repository.name}, but this server has no GitHub App configured, so no ` +
        'installation can be linked to check it out (see the README: a GitHub App); bind the Project to no repository to run without one',
      'INSTALLATION_NOT_LINKED',
    )
  }
  const link = await access.forRun(orgId, repository, scope)
  if (onPr === null) return link
  let head: string | null
  try {
    head = await access.openHead(link, repository, onPr)
  } catch (err) {
    throw new ApiError('unavailable', `the code host could not be asked about pull request #${onPr}: ${(err as Error).message}`)
  }
  if (!head) throw conflict(`on_pr: pull request #${onPr} of ${repository.owner}/${repository.name} is not open`)
  return link
}
