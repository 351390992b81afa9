import { and, eq, or } from 'drizzle-orm'
import type { Db } from '../db/client'
import { projects } from '../db/schema'

export type ProjectRow = typeof projects.$inferSelect

/** `_` means no Project; any other reference is a handle or an id inside the org. */
export const NO_PROJECT = '_'

export function findProject(db: Db, orgId: string, ref: string): ProjectRow | null {
  return (
    db
      .select()
      .from(projects)
      .where(and(eq(projects.orgId, orgId), or(eq(projects.name, ref), eq(projects.id, ref))))
      .get() ?? null
  )
}
