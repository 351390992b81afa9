import { expect, test } from 'bun:test'
import { DEFAULT_CATALOG } from '../../src/catalog/catalog'
import { GatewaySessions } from '../../src/runtime/gateway-bindings'
import type { PlanStanding } from '../../src/plans/service'

const limited: PlanStanding = {
  plan: {
    source: 'org',
    tokenLimit: 1_000,
    computeMinutes: null,
    weeklyComputeMinutes: null,
    spendCapUsd: null,
    maxConcurrent: null,
    paymentMethod: 'card',
  },
  usage: { tokens: 0, compute_minutes: 0, weekly_compute_minutes: 0, spend_usd: 0 },
}
const models = DEFAULT_CATALOG.models.filter((m) => m.id === 'scripted')
const turn = (gateway: GatewaySessions, sessionId: string) =>
  gateway.open({ sessionId, orgId: 'org', turn: 1, workspace: '/workspace', models, standing: () => limited })
const call = (sessionId: string, input: number) => ({
  sessionId,
  turn: 1,
  model: 'scripted',
  input,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
})

test("a closed turn's usage counts toward its org's limit until it is settled, and meters nothing more", () => {
  const gateway = new GatewaySessions()
  const a = turn(gateway, 'a')
  const b = turn(gateway, 'b')
  gateway.record(call('a', 800))
  const closed = gateway.close(a)
  expect(closed.usage?.input).toBe(800)
  expect(gateway.resolve(a)).toBeNull() // its key is dead at once
  expect(gateway.record(call('a', 500))).toBe(0) // a late reply is not the turn's
  // Between the close and the commit of its end, b's call crosses the limit with a's 800 counted.
  gateway.record(call('b', 300))
  expect(gateway.resolve(b)!.refusal!()).toContain('TOKEN_LIMIT_REACHED')
  gateway.close(b)
  gateway.settle(a)
  gateway.settle(b)
  // Settled: a new turn of the org starts from the stored usage alone.
  const c = turn(gateway, 'c')
  gateway.record(call('c', 100))
  expect(gateway.resolve(c)!.refusal!()).toBeNull()
})
