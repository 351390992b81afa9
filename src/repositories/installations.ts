import { asc, eq } from 'drizzle-orm'
import type { Db } from '../db/client'
import { githubInstallations, projects } from '../db/schema'
import { ApiError, conflict, forbidden, unprocessable } from '../domain/errors'
import { newId } from '../domain/ids'
import type { ProjectRow } from '../identity/projects'
import type { CodeHost, Installation, Repository } from './code-host'

export type InstallationRow = typeof githubInstallations.$inferSelect

/** An installation as `GET /o/{org}/github` and the admin CLI show it. */
export const installationView = (row: InstallationRow) => ({
  id: row.id,
  installation_id: row.installationId,
  account: row.account,
  created_at: new Date(row.createdAt).toISOString(),
})

/** A mistake of the operator's (admin CLI): said, never a 500. */
export class InstallationError extends Error {}

/** How a run came to its repository: its Project's, or one its `resources` name (with the entry's `connection`). */
export interface RunRepositoryScope {
  project: ProjectRow | null
  /** True when the repository came from `resources` on a run of no Project. */
  named: boolean
  connection: string | null
}

const unavailable = (err: unknown) =>
  new ApiError('unavailable', `the code host could not be asked about the repository: ${(err as Error).message}`)

/**
 * The GitHub App installations each org links (`GET /o/{org}/github`), and which one a run reaches
 * its repository through. An installation is linked by agentd's operator (`agentd admin github
 * link`), after GitHub confirms it is one of this App's: the number alone proves nothing, so an org
 * admin cannot claim another org's installation.
 */
export class InstallationService {
  constructor(
    private readonly db: Db,
    private readonly github: CodeHost | null,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether this server has a GitHub App: without one no installation can be linked, and no repository checked out. */
  get hasApp(): boolean {
    return this.github !== null
  }

  list(orgId: string): InstallationRow[] {
    return this.db
      .select()
      .from(githubInstallations)
      .where(eq(githubInstallations.orgId, orgId))
      .orderBy(asc(githubInstallations.createdAt), asc(githubInstallations.id))
      .all()
  }

  /** One of the org's installations by its link id or GitHub's number (spec 4.1 `connection`). */
  find(orgId: string, ref: string): InstallationRow | null {
    return this.list(orgId).find((row) => row.id === ref || String(row.installationId) === ref) ?? null
  }

  byId(id: string): InstallationRow | null {
    return this.db.select().from(githubInstallations).where(eq(githubInstallations.id, id)).get() ?? null
  }

  async link(orgId: string, installationId: number): Promise<InstallationRow> {
    if (!this.github) throw new InstallationError('agentd has no GitHub App: set AGENTD_GITHUB_APP_ID and AGENTD_GITHUB_APP_KEY_FILE')
    const taken = this.db.select().from(githubInstallations).where(eq(githubInstallations.installationId, installationId)).get()
    if (taken) {
      if (taken.orgId === orgId) return taken
      throw new InstallationError(`installation ${installationId} is linked to another org`)
    }
    const installation = await this.github.installation(installationId)
    if (!installation) throw new InstallationError(`GitHub knows no installation ${installationId} of this App`)
    const row: InstallationRow = { id: newId(), orgId, installationId, account: installation.account, createdAt: this.now() }
    this.db.insert(githubInstallations).values(row).run()
    return row
  }

  /** Unlinks it: the org's runs reach its repositories no more, Projects bound to it are unbound. */
  unlink(orgId: string, ref: string): InstallationRow {
    const row = this.find(orgId, ref)
    if (!row) throw new InstallationError(`the org has no installation ${ref}`)
    this.db.transaction((tx) => {
      tx.update(projects).set({ githubInstallation: null }).where(eq(projects.githubInstallation, row.id)).run()
      tx.delete(githubInstallations).where(eq(githubInstallations.id, row.id)).run()
    })
    return row
  }

  /**
   * The installation (its link id) a new run reaches `repository` through, as spec 4.1 rules: a
   * Project's bound one, the one `connection` names, or whichever of the org's GitHub says covers
   * it. A Project run: 403 INSTALLATION_NOT_LINKED when the org (or Project) has none, 403
   * REPO_NOT_IN_INSTALLATION when none of them covers the repository; a `resources` run: 422
   * RESOURCE_NOT_ACCESSIBLE for both. 409 when the installation is suspended.
   */
  async forRun(orgId: string, repository: Repository, scope: RunRepositoryScope): Promise<string> {
    const full = `${repository.owner}/${repository.name}`
    const refuse = (project: string, code: 'INSTALLATION_NOT_LINKED' | 'REPO_NOT_IN_INSTALLATION') =>
      scope.named
        ? unprocessable(`resources: no code-host app installation of yours covers ${full}`, 'RESOURCE_NOT_ACCESSIBLE')
        : forbidden(project, code)
    const bound = scope.project?.githubInstallation ?? null
    const candidates =
      bound !== null
        ? [this.byId(bound)].filter((row) => row !== null)
        : scope.connection !== null
          ? [this.find(orgId, scope.connection)].filter((row) => row !== null)
          : this.list(orgId)
    if (candidates.length === 0 || !this.github)
      throw refuse(
        `no GitHub App installation is linked to ${scope.project ? `Project ${scope.project.name}` : 'this org'}`,
        'INSTALLATION_NOT_LINKED',
      )
    let installation: Installation | null
    try {
      installation = await this.github.installationFor(repository)
    } catch (err) {
      throw unavailable(err)
    }
    const link = installation && candidates.find((row) => row.installationId === installation.id)
    if (!installation || !link)
      throw refuse(
        `${full} is not in ` +
          (candidates.length === 1 ? `the installation on ${candidates[0]!.account}` : 'any installation linked to this org'),
        'REPO_NOT_IN_INSTALLATION',
      )
    if (installation.suspended) throw conflict(`the GitHub App installation on ${installation.account} is suspended`)
    return link.id
  }

  /** The installation token for a run's repository; null when its installation is unlinked (or there is no App). */
  async token(linkId: string | null, repository: Repository): Promise<string | null> {
    const row = linkId === null ? null : this.byId(linkId)
    return row && this.github ? this.github.token(row.installationId, repository) : null
  }

  /** GitHub's number of a run's installation; null when it is unlinked. */
  installationId(linkId: string | null): number | null {
    return (linkId === null ? null : this.byId(linkId)?.installationId) ?? null
  }
}
