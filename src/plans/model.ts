import { Elysia, t, type Static } from 'elysia'
import { literals, nullable } from '../domain/schema-util'

export const PAYMENT_METHODS = ['none', 'card'] as const
export type PaymentMethod = (typeof PAYMENT_METHODS)[number]

/** A plan's terms as stored (the `plans` row); a null limit is no limit. */
export interface PlanTerms {
  tokenLimit: number | null
  computeMinutes: number | null
  weeklyComputeMinutes: number | null
  spendCapUsd: number | null
  maxConcurrent: number | null
  paymentMethod: PaymentMethod
}

const Count = t.Integer({ minimum: 0 })

/** `plans` of the config file: the default plan's terms, named as `plan set` names them. */
export const DefaultPlanConfig = t.Object(
  {
    default: t.Optional(
      t.Object(
        {
          token_limit: t.Optional(Count),
          compute_minutes: t.Optional(Count),
          weekly_compute_minutes: t.Optional(Count),
          spend_cap_usd: t.Optional(t.Number({ minimum: 0 })),
          max_concurrent: t.Optional(t.Integer({ minimum: 1 })),
          payment_method: t.Optional(literals(PAYMENT_METHODS)),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
)

/** What the org used in the current periods (contract section 9); the keys of `PlanLimits`. */
export const PlanUsage = t.Object({
  tokens: t.Integer({ description: 'Tokens this calendar month (UTC)' }),
  compute_minutes: t.Number({ description: 'Sandbox running minutes this calendar month (UTC); parked and paused time is free' }),
  weekly_compute_minutes: t.Number({ description: 'Sandbox running minutes this ISO week (UTC)' }),
  spend_usd: t.Number({ description: 'Spend at catalog prices this calendar month (UTC)' }),
})
export type PlanUsage = Static<typeof PlanUsage>

/** The plan's limits, keyed like `PlanUsage`; null where the plan sets none. */
export const PlanLimits = t.Object({
  tokens: nullable(t.Integer()),
  compute_minutes: nullable(t.Integer()),
  weekly_compute_minutes: nullable(t.Integer()),
  spend_usd: nullable(t.Number()),
})
export type PlanLimits = Static<typeof PlanLimits>

/** GET /o/{org}/usage. */
export const UsageView = t.Object({
  plan: t.Union(
    [
      t.Object({
        source: t.Union([t.Literal('default'), t.Literal('org')], {
          description: "`default`: the config file's default plan; `org`: set with `plan set`",
        }),
        max_concurrent: nullable(t.Integer({ description: "Runs at once; null: the server's default" })),
        payment_method: literals(PAYMENT_METHODS),
      }),
      t.Null(),
    ],
    { description: 'null after `plan clear`: creates and follow-ups are 402 PLAN_REQUIRED' },
  ),
  usage: PlanUsage,
  limits: t.Union([PlanLimits, t.Null()], { description: 'null when the org has no plan' }),
})
export type UsageView = Static<typeof UsageView>

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const planModels = new Elysia({ name: 'agentd/models/plans' }).model({ Usage: UsageView })
