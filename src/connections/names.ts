import { and, eq } from 'drizzle-orm'
import type { Db } from '../db/client'
import { providerAccounts } from '../db/schema'
import { unprocessable } from '../domain/errors'
import type { Principal } from '../identity/service'

/** The caller's provider accounts whose provider is `name`: spec 4.1 rule 2 lets a run name an account by its provider. */
export function accountsNamed(db: Db, principal: Principal, orgId: string, name: string): { id: string; account: true }[] {
  if (!principal.userId) return []
  return db
    .select({ id: providerAccounts.id, provider: providerAccounts.provider })
    .from(providerAccounts)
    .where(and(eq(providerAccounts.orgId, orgId), eq(providerAccounts.userId, principal.userId)))
    .all()
    .filter((account) => account.provider === name)
    .map((account) => ({ id: account.id, account: true as const }))
}

/** Rule 2's 422 for a name that matches more than one of the caller's rows, listing their ids. */
export function ambiguousName(index: number, name: string, matches: { id: string }[]) {
  const ids = matches.map((m) => m.id).join(', ')
  return unprocessable(
    `connections[${index}]: "${name}" names ${matches.length} of your connections and accounts (${ids}); send one id instead`,
    'CONNECTION_AMBIGUOUS',
  )
}
