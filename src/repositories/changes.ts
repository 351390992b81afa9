import type { OrgAccess } from '../identity/service'
import type { SessionLookup } from '../session-record/ports'
import type { ChangedFile } from './code-host'
import type { RepositoryRuns } from './runs'

/** `GET …/changes` (spec 4.4): the session's pull request's files, read from the code host. */
export interface Changes {
  pr_url: string | null
  pr_number: number | null
  files: ChangedFile[]
  totals: { files: number; additions: number; deletions: number; changes: number }
  error?: string
  error_code?: 'CHANGES_NO_INSTALLATION' | 'CHANGES_LIST_FAILED'
}

/**
 * What a session's pull request changed, from the code host, so it works after the sandbox is gone.
 * A run with no pull request has none; a code host agentd cannot read is said in the answer, not by
 * an error status.
 */
export class ChangesService {
  constructor(
    private readonly queries: SessionLookup,
    private readonly runs: RepositoryRuns | null,
  ) {}

  async of(access: OrgAccess, projectRef: string, id: string): Promise<Changes> {
    const row = this.queries.find(access, projectRef, id)
    const number = row.prUrl ? Number(/\/pull\/(\d+)$/.exec(row.prUrl)?.[1] ?? Number.NaN) : Number.NaN
    const empty: Changes = {
      pr_url: row.prUrl,
      pr_number: Number.isInteger(number) ? number : null,
      files: [],
      totals: { files: 0, additions: 0, deletions: 0, changes: 0 },
    }
    if (!row.prUrl || !row.repoOwner || !row.repoName || empty.pr_number === null) return empty
    const reading = this.runs?.files(row, empty.pr_number) ?? null
    if (!reading)
      return {
        ...empty,
        error: "the GitHub App installation of the run's repository is no longer linked to the org (or agentd has no GitHub App)",
        error_code: 'CHANGES_NO_INSTALLATION',
      }
    try {
      const files = await reading
      const sum = (key: 'additions' | 'deletions' | 'changes') => files.reduce((n, f) => n + f[key], 0)
      return {
        ...empty,
        files,
        totals: { files: files.length, additions: sum('additions'), deletions: sum('deletions'), changes: sum('changes') },
      }
    } catch (err) {
      return { ...empty, error: `the code host could not be read: ${(err as Error).message}`, error_code: 'CHANGES_LIST_FAILED' }
    }
  }
}
