import { and, eq, or, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { DataCache, DataVersion } from '../db/data-version'
import { projects } from '../db/schema'

export type ProjectRow = typeof projects.$inferSelect

/** `_` means no Project; any other reference is a handle or an id inside the org. */
export const NO_PROJECT = '_'

/**
 * Every session route resolves its Project, so found ones are kept. This process only ever adds
 * Projects (never renames or deletes one), so a found Project stays true until another connection
 * commits; a reference not found is asked again each time, as the Project may be created next.
 */
class ProjectLookup {
  private readonly query
  private readonly found: DataCache<ProjectRow>

  constructor(db: Db) {
    this.query = db
      .select()
      .from(projects)
      .where(
        and(
          eq(projects.orgId, sql.placeholder('orgId')),
          or(eq(projects.name, sql.placeholder('ref')), eq(projects.id, sql.placeholder('ref'))),
        ),
      )
      .prepare()
    this.found = new DataCache(DataVersion.of(db.$client))
  }

  find(orgId: string, ref: string): ProjectRow | null {
    const key = `${orgId} ${ref}`
    const hit = this.found.get(key)
    if (hit) return hit
    const row = this.query.get({ orgId, ref }) ?? null
    if (row) this.found.set(key, row)
    return row
  }
}

const lookups = new WeakMap<Db, ProjectLookup>()

export function findProject(db: Db, orgId: string, ref: string): ProjectRow | null {
  let lookup = lookups.get(db)
  if (!lookup) {
    lookup = new ProjectLookup(db)
    lookups.set(db, lookup)
  }
  return lookup.find(orgId, ref)
}
