import { eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { plans, sessions } from '../db/schema'
import { ApiError } from '../domain/errors'

/**
 * The plan check before new usage (a create or a follow-up): an org whose plan caps tokens or
 * spend, and has used it up, gets 402 with the code and its usage. Compute-minute limits, which
 * need metered sandbox time, come with the plans work.
 */
export function assertPlanAllows(db: Db, orgId: string): void {
  const plan = db.select().from(plans).where(eq(plans.orgId, orgId)).get()
  if (!plan || (plan.tokenLimit === null && plan.spendCapUsd === null)) return
  const used = db
    .select({ tokens: sql<number>`coalesce(sum(${sessions.totalTokens}), 0)`, cost: sql<number>`coalesce(sum(${sessions.totalCostUsd}), 0)` })
    .from(sessions)
    .where(eq(sessions.orgId, orgId))
    .get()!
  const usage = { tokens_used: used.tokens, token_limit: plan.tokenLimit, spend_usd: used.cost, spend_cap_usd: plan.spendCapUsd }
  if (plan.tokenLimit !== null && used.tokens >= plan.tokenLimit) {
    throw new ApiError(402, `The org's plan allows ${plan.tokenLimit} tokens and ${used.tokens} are used`, 'TOKEN_LIMIT_REACHED', usage)
  }
  if (plan.spendCapUsd !== null && used.cost >= plan.spendCapUsd) {
    throw new ApiError(402, `The org's plan caps spend at $${plan.spendCapUsd} and $${used.cost.toFixed(2)} is spent`, 'SPEND_CAP_REACHED', usage)
  }
}
