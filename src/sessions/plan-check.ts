import { eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { plans, sessions } from '../db/schema'
import { ApiError } from '../domain/errors'

/** An org's token and spend limits and what its ended turns used; null limits are unset. */
export interface PlanStanding {
  tokenLimit: number | null
  spendCapUsd: number | null
  tokens: number
  spendUsd: number
}

/** A limit the usage reached: the code of spec section 9 and a sentence naming the limit. */
export interface LimitReached {
  code: 'TOKEN_LIMIT_REACHED' | 'SPEND_CAP_REACHED'
  message: string
  usage: Record<string, number | null>
}

/**
 * The org's standing against its plan's token and spend limits, or null when the plan sets
 * neither (nothing to enforce, and no usage query). Usage is what ended turns stored.
 */
export function planStanding(db: Db, orgId: string): PlanStanding | null {
  const plan = db.select({ tokenLimit: plans.tokenLimit, spendCapUsd: plans.spendCapUsd }).from(plans).where(eq(plans.orgId, orgId)).get()
  if (!plan || (plan.tokenLimit === null && plan.spendCapUsd === null)) return null
  const used = db
    .select({ tokens: sql<number>`coalesce(sum(${sessions.totalTokens}), 0)`, cost: sql<number>`coalesce(sum(${sessions.totalCostUsd}), 0)` })
    .from(sessions)
    .where(eq(sessions.orgId, orgId))
    .get()!
  return { tokenLimit: plan.tokenLimit, spendCapUsd: plan.spendCapUsd, tokens: used.tokens, spendUsd: used.cost }
}

/**
 * The limit that `standing` plus usage not yet stored (turns in progress) has reached, or null.
 * A limit is reached at or over it, so a limit of 0 allows nothing.
 */
export function limitReached(standing: PlanStanding, extraTokens = 0, extraSpendUsd = 0): LimitReached | null {
  const tokens = standing.tokens + extraTokens
  const spend = standing.spendUsd + extraSpendUsd
  const usage = { tokens_used: tokens, token_limit: standing.tokenLimit, spend_usd: spend, spend_cap_usd: standing.spendCapUsd }
  if (standing.tokenLimit !== null && tokens >= standing.tokenLimit) {
    return { code: 'TOKEN_LIMIT_REACHED', message: `The org's plan allows ${standing.tokenLimit} tokens and ${tokens} are used`, usage }
  }
  if (standing.spendCapUsd !== null && spend >= standing.spendCapUsd) {
    return { code: 'SPEND_CAP_REACHED', message: `The org's plan caps spend at $${standing.spendCapUsd} and $${spend.toFixed(2)} is spent`, usage }
  }
  return null
}

/**
 * The plan check before new usage (a create or a follow-up): an org whose plan caps tokens or
 * spend, and has used it up, gets 402 with the code and its usage. Mid-turn, the gateway enforces
 * the same limits (gateway-sessions.ts). Compute-minute limits, which need metered sandbox time,
 * come with the plans work.
 */
export function assertPlanAllows(db: Db, orgId: string): void {
  const standing = planStanding(db, orgId)
  const reached = standing && limitReached(standing)
  if (reached) throw new ApiError('payment_required', reached.message, reached.code, reached.usage)
}
