import { ApiError } from '../domain/errors'
import type { Principal } from '../identity/service'
import type { SessionRow } from '../session-record/store'

/**
 * A session on a user's own provider account, or with their tool servers (`toolServers`: their
 * tokens ride on its requests), takes new work (a follow-up, a resume) from that user only. Other
 * members may still read it, pause or cancel it.
 */
export function ownAccountOnly(principal: Principal, row: SessionRow, toolServers = false): void {
  if (row.startedByUserId === principal.userId) return
  if (row.accountId !== null)
    throw new ApiError('forbidden', "This session runs on another user's own provider account: only they can give it more work")
  if (toolServers)
    throw new ApiError(
      'forbidden',
      "This session calls another user's tool servers with their credentials: only they can give it more work",
    )
}
