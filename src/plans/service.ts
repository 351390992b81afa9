import { and, eq, gte, sql } from 'drizzle-orm'
import { isPriced, type Catalog } from '../catalog/catalog'
import type { Db } from '../db/client'
import { orgs, plans, usageRecords } from '../db/schema'
import { ApiError, forbidden } from '../domain/errors'
import { IdentityError, type OrgAccess } from '../identity/service'
import type { PlanLimits, PlanTerms, PlanUsage, UsageView } from './model'
import { isoWeekStart, monthStart } from './periods'

/** The plan an org is on: its own (`plan set`) or the config's default; null after `plan clear`. */
export interface OrgPlan extends PlanTerms {
  source: 'default' | 'org'
}

/** An org's plan and what it used in the current periods: what every limit is checked against. */
export interface PlanStanding {
  plan: OrgPlan | null
  usage: PlanUsage
}

/** The usage kinds the gateway can see grow mid-turn (contract section 7): tokens and spend. */
export type LimitKind = keyof PlanUsage

/** A limit the usage reached: the 402 code of contract section 9 and a sentence naming the limit. */
export interface LimitReached {
  code: 'TOKEN_LIMIT_REACHED' | 'COMPUTE_LIMIT_REACHED' | 'WEEKLY_COMPUTE_LIMIT_REACHED' | 'SPEND_CAP_REACHED'
  message: string
}

const CHECKS: { kind: LimitKind; code: LimitReached['code']; says: (limit: number, used: number) => string }[] = [
  {
    kind: 'tokens',
    code: 'TOKEN_LIMIT_REACHED',
    says: (limit, used) => `The org's plan allows ${limit} tokens a month and ${used} are used`,
  },
  {
    kind: 'compute_minutes',
    code: 'COMPUTE_LIMIT_REACHED',
    says: (limit, used) => `The org's plan allows ${limit} compute minutes a month and ${round(used)} are used`,
  },
  {
    kind: 'weekly_compute_minutes',
    code: 'WEEKLY_COMPUTE_LIMIT_REACHED',
    says: (limit, used) => `The org's plan allows ${limit} compute minutes a week and ${round(used)} are used`,
  },
  {
    kind: 'spend_usd',
    code: 'SPEND_CAP_REACHED',
    says: (limit, used) => `The org's plan caps spend at $${limit} a month and $${used.toFixed(2)} is spent`,
  },
]

const round = (minutes: number) => Math.round(minutes * 1000) / 1000

export function limitsOf(plan: PlanTerms): PlanLimits {
  return {
    tokens: plan.tokenLimit,
    compute_minutes: plan.computeMinutes,
    weekly_compute_minutes: plan.weeklyComputeMinutes,
    spend_usd: plan.spendCapUsd,
  }
}

/**
 * The first limit of the plan that `usage` (plus `extra`, usage not stored yet: turns in progress)
 * reached, among `kinds`, or null. Reached at or over it, so a limit of 0 allows nothing.
 */
export function limitReached(standing: PlanStanding, extra: Partial<PlanUsage> = {}, kinds?: LimitKind[]): LimitReached | null {
  if (!standing.plan) return null
  const limits = limitsOf(standing.plan)
  for (const check of CHECKS) {
    if (kinds && !kinds.includes(check.kind)) continue
    const limit = limits[check.kind]
    const used = standing.usage[check.kind] + (extra[check.kind] ?? 0)
    if (limit !== null && used >= limit) return { code: check.code, message: check.says(limit, used) }
  }
  return null
}

/**
 * Plans and metering (contract section 9). Usage is the sum of `usage_records` since the start of
 * each period: what ended turns stored; the gateway adds the turns still in progress.
 */
export class PlanService {
  constructor(private readonly deps: { db: Db; catalog: Catalog; defaultPlan: PlanTerms; now: () => number }) {}

  planOf(orgId: string): OrgPlan | null {
    const row = this.deps.db.select().from(plans).where(eq(plans.orgId, orgId)).get()
    if (!row) return { source: 'default', ...this.deps.defaultPlan }
    if (row.cleared) return null
    const { tokenLimit, computeMinutes, weeklyComputeMinutes, spendCapUsd, maxConcurrent, paymentMethod } = row
    return { source: 'org', tokenLimit, computeMinutes, weeklyComputeMinutes, spendCapUsd, maxConcurrent, paymentMethod }
  }

  usageOf(orgId: string): PlanUsage {
    const now = this.deps.now()
    const month = monthStart(now)
    const week = isoWeekStart(now)
    // One pass over the org's rows since the earlier of the two period starts (a week can begin
    // in the previous month).
    const row = this.deps.db
      .select({
        tokens: sql<number>`coalesce(sum(case when ${usageRecords.at} >= ${month} then ${usageRecords.tokens} end), 0)`,
        spend: sql<number>`coalesce(sum(case when ${usageRecords.at} >= ${month} then ${usageRecords.spendUsd} end), 0)`,
        computeMs: sql<number>`coalesce(sum(case when ${usageRecords.at} >= ${month} then ${usageRecords.computeMs} end), 0)`,
        weekMs: sql<number>`coalesce(sum(case when ${usageRecords.at} >= ${week} then ${usageRecords.computeMs} end), 0)`,
      })
      .from(usageRecords)
      .where(and(eq(usageRecords.orgId, orgId), gte(usageRecords.at, Math.min(month, week))))
      .get()!
    return {
      tokens: row.tokens,
      compute_minutes: row.computeMs / 60_000,
      weekly_compute_minutes: row.weekMs / 60_000,
      spend_usd: row.spend,
    }
  }

  standing(orgId: string): PlanStanding {
    return { plan: this.planOf(orgId), usage: this.usageOf(orgId) }
  }

  /**
   * The standing the gateway checks each model call against (contract section 7), or null when the
   * plan limits neither tokens nor spend: then no usage query runs per call.
   */
  meteredStanding(orgId: string): PlanStanding | null {
    const plan = this.planOf(orgId)
    if (!plan || (plan.tokenLimit === null && plan.spendCapUsd === null)) return null
    return { plan, usage: this.usageOf(orgId) }
  }

  /** Whether the org's turns may call priced models: its plan has a payment method (the gateway holds to it mid-turn). */
  allowsPriced(orgId: string): boolean {
    return this.planOf(orgId)?.paymentMethod !== 'none'
  }

  /** Runs at once the org's plan allows, or null for the server's default. */
  maxConcurrent(orgId: string): number | null {
    return this.planOf(orgId)?.maxConcurrent ?? null
  }

  /**
   * Before new usage (a create, a follow-up) on `modelId`: 402 PLAN_REQUIRED with no plan,
   * PAYMENT_METHOD_REQUIRED for a priced model on a plan without one, or the limit reached. Every
   * 402 carries `usage` and `limits`. On the caller's own provider account the model's tokens and
   * spend are the caller's, so only the plan itself and its compute limits apply.
   */
  assertAllows(orgId: string, modelId: string | null, ownAccount = false): void {
    const standing = this.standing(orgId)
    const refuse = (code: string, message: string) => {
      throw new ApiError('payment_required', message, code, {
        usage: present(standing.usage),
        limits: standing.plan && limitsOf(standing.plan),
      })
    }
    if (!standing.plan) refuse('PLAN_REQUIRED', 'The org has no plan; an operator gives it one with `plan set`')
    const model = modelId === null ? undefined : this.deps.catalog.models.find((m) => m.id === modelId)
    if (!ownAccount && standing.plan!.paymentMethod === 'none' && model && isPriced(model)) {
      refuse('PAYMENT_METHOD_REQUIRED', `The model ${model.id} is priced and the org's plan has no payment method`)
    }
    const reached = limitReached(standing, {}, ownAccount ? ['compute_minutes', 'weekly_compute_minutes'] : undefined)
    if (reached) refuse(reached.code, reached.message)
  }

  /**
   * `plan set` (contract section 2): changes only what `input` names, on top of the plan the org is
   * on (its own, else the default, which a cleared org also starts again from). A null limit is
   * none.
   */
  setPlan(orgSlug: string, input: Partial<PlanTerms>) {
    const orgId = this.orgIdOf(orgSlug)
    const row = this.deps.db.select().from(plans).where(eq(plans.orgId, orgId)).get()
    const base = row && !row.cleared ? row : this.deps.defaultPlan
    const pick = <K extends keyof PlanTerms>(key: K): PlanTerms[K] => (input[key] === undefined ? base[key] : input[key]!)
    const next = {
      orgId,
      tokenLimit: pick('tokenLimit'),
      computeMinutes: pick('computeMinutes'),
      weeklyComputeMinutes: pick('weeklyComputeMinutes'),
      spendCapUsd: pick('spendCapUsd'),
      maxConcurrent: pick('maxConcurrent'),
      paymentMethod: pick('paymentMethod'),
      cleared: false,
      updatedAt: this.deps.now(),
    }
    this.deps.db.insert(plans).values(next).onConflictDoUpdate({ target: plans.orgId, set: next }).run()
    return {
      org: orgSlug,
      token_limit: next.tokenLimit,
      compute_minutes: next.computeMinutes,
      weekly_compute_minutes: next.weeklyComputeMinutes,
      spend_cap_usd: next.spendCapUsd,
      max_concurrent: next.maxConcurrent,
      payment_method: next.paymentMethod,
    }
  }

  /** `plan clear`: the org has no plan; creates and follow-ups are 402 PLAN_REQUIRED until `plan set`. */
  clearPlan(orgSlug: string) {
    const orgId = this.orgIdOf(orgSlug)
    const cleared = { orgId, ...this.deps.defaultPlan, cleared: true, updatedAt: this.deps.now() }
    this.deps.db.insert(plans).values(cleared).onConflictDoUpdate({ target: plans.orgId, set: cleared }).run()
    return { org: orgSlug, plan: null }
  }

  private orgIdOf(slug: string): string {
    const org = this.deps.db.select({ id: orgs.id }).from(orgs).where(eq(orgs.slug, slug)).get()
    if (!org) throw new IdentityError(`no org "${slug}"`)
    return org.id
  }

  /** GET /o/{org}/usage: org admins only. */
  view(access: OrgAccess): UsageView {
    if (access.role !== 'admin') throw forbidden("Only org admins can read the org's usage")
    const { plan, usage } = this.standing(access.orgId)
    return {
      plan: plan && { source: plan.source, max_concurrent: plan.maxConcurrent, payment_method: plan.paymentMethod },
      usage: present(usage),
      limits: plan && limitsOf(plan),
    }
  }
}

/** Usage as answered: minutes to three decimals, spend to a millionth of a dollar. */
function present(usage: PlanUsage): PlanUsage {
  return {
    tokens: usage.tokens,
    compute_minutes: round(usage.compute_minutes),
    weekly_compute_minutes: round(usage.weekly_compute_minutes),
    spend_usd: Math.round(usage.spend_usd * 1e6) / 1e6,
  }
}
