import { ApiError } from '../domain/errors'
import type { Principal } from '../identity/service'
import type { SessionRow } from '../sessions/store'

/**
 * A session on a user's own provider account takes new work (a follow-up, a resume) from that user
 * only: it runs on their key. Other members may still read it, pause or cancel it.
 */
export function ownAccountOnly(principal: Principal, row: SessionRow): void {
  if (row.accountId !== null && row.startedByUserId !== principal.userId) {
    throw new ApiError('forbidden', "This session runs on another user's own provider account: only they can give it more work")
  }
}
