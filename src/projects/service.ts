import { asc, eq } from 'drizzle-orm'
import type { Db } from '../db/client'
import { projects } from '../db/schema'
import { badRequest, conflict, forbidden, unprocessable } from '../domain/errors'
import { findProject } from '../identity/projects'
import { IdentityError, type IdentityService, type OrgAccess } from '../identity/service'
import type { InstallationService } from '../repositories/installations'

type Row = typeof projects.$inferSelect

const view = (row: Row) => ({
  id: row.id,
  name: row.name,
  repository: row.repoOwner && row.repoName ? `${row.repoOwner}/${row.repoName}` : null,
  github_installation: row.githubInstallation,
  created_at: new Date(row.createdAt).toISOString(),
})

/** The org's Projects: listed for its members, made by its admins (as `agentd admin project create` does). */
export class ProjectService {
  constructor(
    private readonly db: Db,
    private readonly identity: IdentityService,
    private readonly installations: InstallationService,
  ) {}

  list(access: OrgAccess) {
    return { data: this.db.select().from(projects).where(eq(projects.orgId, access.orgId)).orderBy(asc(projects.name)).all().map(view) }
  }

  create(access: OrgAccess, body: { name: string; repository?: string; github_installation?: string }) {
    if (access.role !== 'admin') throw forbidden('Only org admins can create Projects')
    // Its runs would all be 403 INSTALLATION_NOT_LINKED: refused now, saying why.
    if (body.repository !== undefined && !this.installations.hasApp)
      throw unprocessable(
        'repository: this server has no GitHub App, so no run of the Project could check the repository out; ' +
          'create the Project without one, or configure the App (see the README)',
        'INSTALLATION_NOT_LINKED',
      )
    const link = body.github_installation === undefined ? null : this.installations.find(access.orgId, body.github_installation)
    if (body.github_installation !== undefined && !link)
      throw unprocessable(
        `github_installation: the org has no installation ${body.github_installation} (GET /o/${access.slug}/github)`,
        'INSTALLATION_NOT_LINKED',
      )
    if (findProject(this.db, access.orgId, body.name)) throw conflict(`A Project named ${body.name} exists in this org`)
    try {
      const made = this.identity.createProject(access.slug, body.name, body.repository ?? null, link?.id ?? null)
      return view(findProject(this.db, access.orgId, made.id)!)
    } catch (err) {
      if (err instanceof IdentityError) throw badRequest(err.message)
      throw err
    }
  }
}
