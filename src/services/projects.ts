import { and, eq, or, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { projects } from '../db/schema'

export type ProjectRow = typeof projects.$inferSelect

/** `_` means no Project; any other reference is a handle or an id inside the org. */
export const NO_PROJECT = '_'

const prepared = new WeakMap<Db, ReturnType<typeof prepare>>()

function prepare(db: Db) {
  return db
    .select()
    .from(projects)
    .where(and(eq(projects.orgId, sql.placeholder('orgId')), or(eq(projects.name, sql.placeholder('ref')), eq(projects.id, sql.placeholder('ref')))))
    .prepare()
}

export function findProject(db: Db, orgId: string, ref: string): ProjectRow | null {
  let query = prepared.get(db)
  if (!query) {
    query = prepare(db)
    prepared.set(db, query)
  }
  return query.get({ orgId, ref }) ?? null
}
