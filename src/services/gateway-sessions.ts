import { randomBytes } from 'node:crypto'
import type { GatewaySession as GatewayBinding, UsageRecord as MeteredUsage } from '../gateway/gateway'
import type { TokenUsage } from '../harness/harness'

/**
 * Which gateway key belongs to which session, and the tokens metered for each session's turn in
 * progress. A key is minted per turn and forgotten when the turn ends, so a leaked key dies with it.
 */
export class GatewaySessions {
  private readonly bindings = new Map<string, GatewayBinding>()
  private readonly meters = new Map<string, TokenUsage & { calls: number }>()

  open(binding: GatewayBinding): string {
    const token = `gw_${randomBytes(24).toString('base64url')}`
    this.bindings.set(token, binding)
    this.meters.set(binding.sessionId, { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0, calls: 0 })
    return token
  }

  /** Forgets the key and returns what the turn used, or null if the model was never called. */
  close(token: string): (TokenUsage & { calls: number }) | null {
    const binding = this.bindings.get(token)
    this.bindings.delete(token)
    if (!binding) return null
    const meter = this.meters.get(binding.sessionId) ?? null
    this.meters.delete(binding.sessionId)
    return meter && meter.calls > 0 ? meter : null
  }

  resolve(token: string): GatewayBinding | null {
    return this.bindings.get(token) ?? null
  }

  record(usage: MeteredUsage): void {
    const meter = this.meters.get(usage.sessionId)
    if (!meter) return
    meter.input += usage.input
    meter.output += usage.output
    meter.cacheRead += usage.cacheRead
    meter.cacheWrite += usage.cacheWrite
    meter.calls += 1
  }
}
