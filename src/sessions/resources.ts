import { badRequest, unprocessable } from '../domain/errors'
import type { ProjectRow } from '../identity/projects'
import { MAX_ISSUES, type IssueResource } from '../connections/tracker'

/** The code host whose repository URLs `resources` takes (spec 4.1), and the issue tracker's. */
const CODE_HOST = 'github.com'
const TRACKER = 'linear.app'

/** A resource URL as spec 4.1 reads it. */
export type Resource =
  | { kind: 'repository'; owner: string; repo: string; branch: string | null; pull: number | null }
  | { kind: 'issue'; workspace: string; issue: string }

const SEGMENT = /^[A-Za-z0-9._-]+$/

const decoded = (text: string): string | null => {
  try {
    return decodeURIComponent(text)
  } catch {
    return null
  }
}

/** The resource a URL names, or null when it is none of spec 4.1's forms. */
export function parseResource(raw: string): Resource | null {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return null
  }
  if (url.protocol !== 'https:' || url.username || url.password || url.port) return null
  const parts = url.pathname.replace(/\/+$/, '').split('/').slice(1)
  if (url.hostname === CODE_HOST && parts.length >= 2 && parts.slice(0, 2).every((p) => SEGMENT.test(p))) {
    const [owner, repo, kind, ...rest] = parts as [string, string, string | undefined, ...string[]]
    const name = repo.replace(/\.git$/, '')
    if (kind === undefined) return { kind: 'repository', owner, repo: name, branch: null, pull: null }
    if (kind === 'tree' && rest.length > 0) {
      const branch = decoded(rest.join('/'))
      return branch === null ? null : { kind: 'repository', owner, repo: name, branch, pull: null }
    }
    if (kind === 'pull' && rest.length === 1 && /^[1-9][0-9]{0,9}$/.test(rest[0]!))
      return { kind: 'repository', owner, repo: name, branch: null, pull: Number(rest[0]) }
    return null
  }
  // Linear's copied links end in a slug of the title (`/issue/ENG-12/fix-the-login`): it names nothing.
  if (
    url.hostname === TRACKER &&
    (parts.length === 3 || (parts.length === 4 && SEGMENT.test(parts[3]!))) &&
    parts[1] === 'issue' &&
    SEGMENT.test(parts[0]!) &&
    /^[A-Za-z][A-Za-z0-9]*-[0-9]+$/.test(parts[2]!)
  ) {
    return { kind: 'issue', workspace: parts[0]!, issue: parts[2]! }
  }
  return null
}

/** The repository a run's `resources` name: checked out for it as a Project's is. */
export type ResourceRepository = Extract<Resource, { kind: 'repository' }> & { connection: string | null }

/**
 * `resources` of a create (spec 4.1): every URL one of the forms (else 422 RESOURCE_UNSUPPORTED),
 * at most one repository (400), on a Project run only the Project's own. A repository is reached
 * through an installation of the org's GitHub App (`codeHost`; without one it is 422
 * RESOURCE_NOT_ACCESSIBLE) and returned with its entry's `connection`; the issues are returned to
 * be read through the caller's tracker connection (connections/tracker.ts).
 */
export function checkResources(
  resources: { url: string; connection?: string }[],
  project: ProjectRow | null,
  codeHost: boolean,
): { repository: ResourceRepository | null; issues: IssueResource[] } {
  const parsed = resources.map((r, i) => {
    const resource = parseResource(r.url)
    if (!resource) {
      throw unprocessable(
        `resources[${i}]: ${JSON.stringify(r.url)} is not a resource agentd can put before the agent ` +
          `(https://${CODE_HOST}/<owner>/<repo>[/tree/<branch> | /pull/<n>] or https://${TRACKER}/<workspace>/issue/<ID>)`,
        'RESOURCE_UNSUPPORTED',
      )
    }
    return resource
  })
  const repositories = parsed.flatMap((r, i) => (r.kind === 'repository' ? [{ ...r, connection: resources[i]!.connection ?? null }] : []))
  if (repositories.length > 1) throw badRequest('resources: at most one repository per run')
  for (const [i, resource] of parsed.entries()) {
    if (resource.kind === 'repository') {
      const full = `${resource.owner}/${resource.repo}`
      if (project?.repoOwner && `${project.repoOwner}/${project.repoName}`.toLowerCase() !== full.toLowerCase()) {
        throw unprocessable(
          `resources[${i}]: a run of Project ${project.name} may only name its own repository ` +
            `(${project.repoOwner}/${project.repoName}), not ${full}`,
          'RESOURCE_NOT_ACCESSIBLE',
        )
      }
      if (!codeHost)
        throw unprocessable(`resources[${i}]: no code-host app installation of yours covers ${full}`, 'RESOURCE_NOT_ACCESSIBLE')
    }
  }
  const named = new Set(parsed.flatMap((r) => (r.kind === 'issue' ? [r.issue.toUpperCase()] : [])))
  if (named.size > MAX_ISSUES) throw badRequest(`resources: at most ${MAX_ISSUES} tracker issues per run`)
  const issues = parsed.flatMap((r, index) =>
    r.kind === 'issue' ? [{ index, workspace: r.workspace, issue: r.issue, connection: resources[index]!.connection ?? null }] : [],
  )
  return { repository: repositories[0] ?? null, issues }
}

/**
 * The run's repository: its Project's, or the one its `resources` name. That resource's
 * `/tree/<branch>` or `/pull/<n>` becomes the run's base_branch or on_pr when the body names neither.
 */
export function runRepository(
  project: ProjectRow | null,
  named: ResourceRepository | null,
  runSpec: { baseBranch: string | null; onPr: number | null },
): { owner: string; name: string } | null {
  if (named && runSpec.baseBranch === null && runSpec.onPr === null) Object.assign(runSpec, { baseBranch: named.branch, onPr: named.pull })
  if (project?.repoOwner && project.repoName) return { owner: project.repoOwner, name: project.repoName }
  return named && { owner: named.owner, name: named.repo }
}
