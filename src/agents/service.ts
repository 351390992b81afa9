import { and, desc, eq } from 'drizzle-orm'
import { randomBytes } from 'node:crypto'
import type { Db } from '../db/client'
import { savedAgentRevisions, savedAgents, type AgentConfig } from '../db/schema'
import { badRequest, conflict, forbidden, notFound } from '../domain/errors'
import { catalogRevision, type Catalog, type HarnessVersions } from '../catalog/catalog'
import type { OrgAccess, Principal } from '../identity/service'
import { runSpecOf } from '../sessions/create-rules'
import { bodyDigest } from '../domain/digest'
import type { CreateSessionBody } from '../sessions/model'
import type { AgentProfile, SavedAgentProfiles } from '../sessions/ports'
import type { CreateAgentBody, PatchAgentBody } from './model'
import { assertSkillUrl } from '../skills/service'

export interface AgentServiceDeps {
  db: Db
  catalog: Catalog
  versions: HarnessVersions
  now: () => number
}

const at = (ms: number) => new Date(ms).toISOString()

type AgentRow = typeof savedAgents.$inferSelect
type RevisionRow = typeof savedAgentRevisions.$inferSelect

/** The revision a run of a saved agent is pinned to (spec 2.2 `profile_*`, `snapshot`). */
/**
 * Saved agents: reviewed setups an org's members start runs from (shape B `agent_id`). Every
 * change of configuration is a new revision with its digest, reviewed against the catalog of the
 * moment; a run of a revision whose catalog has changed since is refused until it is reviewed again.
 */
export class AgentService implements SavedAgentProfiles {
  private readonly catalogRevision: string

  constructor(private readonly deps: AgentServiceDeps) {
    this.catalogRevision = catalogRevision(deps.catalog)
  }

  create(principal: Principal, access: OrgAccess, body: CreateAgentBody) {
    const config = this.checked({
      harness: body.harness,
      model: body.model ?? null,
      effort: body.effort ?? null,
      speed: body.speed ?? null,
      instructions: body.instructions ?? null,
      skills: body.skills ?? [],
      connections: body.connections ?? [],
    })
    const now = this.deps.now()
    const id = `agent_${randomBytes(12).toString('hex')}`
    this.deps.db.transaction(() => {
      this.deps.db
        .insert(savedAgents)
        .values({
          id,
          orgId: access.orgId,
          name: body.name,
          revision: 1,
          createdByUserId: principal.userId,
          createdAt: now,
          updatedAt: now,
        })
        .run()
      this.addRevision(id, 1, config, principal, now)
    })
    return this.get(access, id)
  }

  list(access: OrgAccess) {
    const rows = this.deps.db
      .select()
      .from(savedAgents)
      .where(eq(savedAgents.orgId, access.orgId))
      .orderBy(desc(savedAgents.createdAt))
      .all()
    return { data: rows.map((row) => this.view(row, this.revision(row.id, row.revision))) }
  }

  get(access: OrgAccess, id: string) {
    const row = this.find(access.orgId, id)
    return this.view(row, this.revision(id, row.revision))
  }

  /**
   * A new name, a new configuration (a new revision when it differs from the current one), or a
   * review: the current configuration as a new revision against today's catalog.
   */
  update(principal: Principal, access: OrgAccess, id: string, body: PatchAgentBody) {
    const row = this.changeable(principal, access, id)
    const current = this.revision(id, row.revision)
    const { name, review, ...changes } = body
    // A rename alone is no revision and asks nothing of the catalog (the model may have left it since).
    const config = Object.keys(changes).length > 0 || review === true ? this.checked({ ...current.config, ...changes }) : current.config
    const changed = bodyDigest(config) !== current.digest || (review === true && current.catalogRevision !== this.catalogRevision)
    const now = this.deps.now()
    this.deps.db.transaction(() => {
      if (changed) this.addRevision(id, row.revision + 1, config, principal, now)
      this.deps.db
        .update(savedAgents)
        .set({ ...(name !== undefined ? { name } : {}), ...(changed ? { revision: row.revision + 1 } : {}), updatedAt: now })
        .where(eq(savedAgents.id, id))
        .run()
    })
    return this.get(access, id)
  }

  /** Deletes a saved agent and its revisions; the runs of it keep the snapshot they started from. */
  remove(principal: Principal, access: OrgAccess, id: string): void {
    this.changeable(principal, access, id)
    this.deps.db.delete(savedAgents).where(eq(savedAgents.id, id)).run()
  }

  revisions(access: OrgAccess, id: string) {
    this.find(access.orgId, id)
    const rows = this.deps.db
      .select()
      .from(savedAgentRevisions)
      .where(eq(savedAgentRevisions.agentId, id))
      .orderBy(desc(savedAgentRevisions.revision))
      .all()
    return {
      data: rows.map((r) => ({
        revision: r.revision,
        digest: r.digest,
        catalog_revision: r.catalogRevision,
        config: r.config,
        created_at: at(r.createdAt),
      })),
    }
  }

  /**
   * The current revision of `id` for a run in `orgId`: 400 when the org has no such agent, 409
   * CATALOG_REFRESH_REQUIRED when the catalog changed since the revision was reviewed.
   */
  forRun(orgId: string, id: string): AgentProfile {
    const row = this.deps.db
      .select()
      .from(savedAgents)
      .where(and(eq(savedAgents.id, id), eq(savedAgents.orgId, orgId)))
      .get()
    if (!row) throw badRequest(`agent_id ${JSON.stringify(id)} names no saved agent of this org`)
    const revision = this.revision(id, row.revision)
    if (revision.catalogRevision !== this.catalogRevision) {
      throw conflict(
        `The catalog changed since saved agent "${row.name}" (revision ${row.revision}) was reviewed ` +
          `(${revision.catalogRevision}, now ${this.catalogRevision}); review it again (PATCH with review: true)`,
        'CATALOG_REFRESH_REQUIRED',
      )
    }
    return {
      id,
      name: row.name,
      revision: row.revision,
      digest: revision.digest,
      catalogRevision: revision.catalogRevision,
      config: revision.config,
    }
  }

  /**
   * A configuration every create rule would accept (the harness runs here, the model is offered
   * for it, effort and speed are the model's); skills and connections are not run yet (400).
   */
  private checked(config: AgentConfig): AgentConfig {
    const probe: CreateSessionBody = { agent: config.harness, prompt: 'check' }
    if (config.model) probe.model = config.model
    if (config.effort) probe.effort = config.effort
    if (config.speed) probe.speed = config.speed
    runSpecOf(probe, this.deps.catalog, this.deps.versions, false)
    // Skills are fetched when a run starts (and pinned then); here only their form is checked.
    config.skills.forEach((url, index) => assertSkillUrl(url, index))
    return config
  }

  private addRevision(agentId: string, revision: number, config: AgentConfig, principal: Principal, now: number): void {
    this.deps.db
      .insert(savedAgentRevisions)
      .values({
        agentId,
        revision,
        config,
        digest: bodyDigest(config),
        catalogRevision: this.catalogRevision,
        createdByUserId: principal.userId,
        createdAt: now,
      })
      .run()
  }

  /**
   * The agent, when the caller may change or delete it: its creator or an org admin (contract
   * section 11), else 403. A run resolves the agent's connection names against whoever runs it,
   * so a member who could rewrite a colleague's agent would point the colleague's tool servers at
   * the member's instructions.
   */
  private changeable(principal: Principal, access: OrgAccess, id: string): AgentRow {
    const row = this.find(access.orgId, id)
    const creator = row.createdByUserId !== null && row.createdByUserId === principal.userId
    if (!creator && access.role !== 'admin')
      throw forbidden(`Only the creator of saved agent "${row.name}" or an org admin can change or delete it`)
    return row
  }

  private find(orgId: string, id: string): AgentRow {
    const row = this.deps.db
      .select()
      .from(savedAgents)
      .where(and(eq(savedAgents.id, id), eq(savedAgents.orgId, orgId)))
      .get()
    if (!row) throw notFound('Saved agent not found')
    return row
  }

  private revision(agentId: string, revision: number): RevisionRow {
    return this.deps.db
      .select()
      .from(savedAgentRevisions)
      .where(and(eq(savedAgentRevisions.agentId, agentId), eq(savedAgentRevisions.revision, revision)))
      .get()!
  }

  private view(row: AgentRow, revision: RevisionRow) {
    return {
      id: row.id,
      name: row.name,
      revision: row.revision,
      digest: revision.digest,
      catalog_revision: revision.catalogRevision,
      catalog_current: revision.catalogRevision === this.catalogRevision,
      ...revision.config,
      created_at: at(row.createdAt),
      updated_at: at(row.updatedAt),
    }
  }
}
