import { Value } from '@sinclair/typebox/value'
import { ConfigError, readConfigFile } from '../config'
import { DefaultPlanConfig, type PlanTerms } from './model'

/**
 * The plan every org starts on: `plans.default` of the config file (AGENTD_CONFIG), fields as
 * `plan set` names them. Without one, orgs are unlimited and need no payment method: a team that
 * runs agentd for itself, on its own provider keys, sets no plan at all.
 */
export function loadDefaultPlan(configFile: string | null): PlanTerms {
  const unlimited: PlanTerms = {
    tokenLimit: null,
    computeMinutes: null,
    weeklyComputeMinutes: null,
    spendCapUsd: null,
    maxConcurrent: null,
    paymentMethod: 'card',
  }
  const plans = readConfigFile(configFile).plans
  if (plans === undefined) return unlimited
  const error = Value.Errors(DefaultPlanConfig, plans).First()
  if (error) throw new ConfigError(`AGENTD_CONFIG plans${error.path.replaceAll('/', '.')}: ${error.message}`)
  const terms = (plans as { default?: Record<string, unknown> }).default
  if (!terms) return unlimited
  return {
    tokenLimit: (terms.token_limit as number | undefined) ?? null,
    computeMinutes: (terms.compute_minutes as number | undefined) ?? null,
    weeklyComputeMinutes: (terms.weekly_compute_minutes as number | undefined) ?? null,
    spendCapUsd: (terms.spend_cap_usd as number | undefined) ?? null,
    maxConcurrent: (terms.max_concurrent as number | undefined) ?? null,
    paymentMethod: (terms.payment_method as 'none' | 'card' | undefined) ?? 'none',
  }
}
