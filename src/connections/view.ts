import type { connections } from '../db/schema'

type Row = typeof connections.$inferSelect

/** A connection as the API shows it: never its token or OAuth state. */
export function connectionView(
  row: Pick<Row, 'id' | 'name' | 'url' | 'projectId' | 'sealedToken' | 'status' | 'createdAt'> & { connector?: string | null },
) {
  const connector = row.connector ?? null
  return {
    id: row.id,
    name: row.name,
    url: row.url,
    project_id: row.projectId,
    connector,
    auth_mode: connector !== null ? ('oauth' as const) : row.sealedToken === null ? ('none' as const) : ('bearer' as const),
    status: row.status,
    created_at: new Date(row.createdAt).toISOString(),
  }
}
