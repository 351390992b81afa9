import { randomBytes } from 'node:crypto'
import type { GatewaySession as GatewayBinding, UsageRecord as MeteredUsage, ProviderConfig, ProviderName } from '../gateway/protocol'
import type { TokenUsage } from '../harness/harness'
import { isPriced, type CatalogModel } from '../catalog/catalog'
import { limitReached, type PlanStanding } from '../plans/service'

/** What the runtime knows of a turn when it opens the gateway for it. */
export interface TurnOpening {
  sessionId: string
  orgId: string
  turn: number
  /** The session's workspace as the sandbox sees it. */
  workspace: string
  /** The catalog models of the session's harness: the only ones served, each at its own price. */
  models: readonly CatalogModel[]
  /** The org's standing against its plan's token and spend limits (null: none set, or an own account's turn). */
  standing: () => PlanStanding | null
  /**
   * False when the org's plan has no payment method: then only free models are served, whatever
   * the sandbox asks for (PAYMENT_METHOD_REQUIRED is checked on the session's model at create).
   */
  pricedModels?: boolean
  /** The caller's own provider account the turn runs on (null: removed since), or undefined: the operator's providers. */
  account?: { name: ProviderName; config: ProviderConfig } | null
}

/** What the runtime asks per turn of a session: its limits and its account. */
export type TurnTerms = Pick<TurnOpening, 'standing' | 'account' | 'pricedModels'>

/** What a turn used, as the gateway metered it. */
export interface TurnMeter extends TokenUsage {
  calls: number
  /** At the catalog price of each model actually called. */
  costUsd: number
}

/** What closing a turn's gateway reports. */
export interface TurnClosed {
  /** Null when the model was never called. */
  usage: TurnMeter | null
  /** The plan limit this turn crossed (its calls were refused past it), naming the limit; else null. */
  limit: string | null
}

interface OpenTurn {
  opening: TurnOpening
  binding: GatewayBinding
  prices: Map<string, CatalogModel['pricing']>
  meter: TurnMeter
  limit: string | null
  /** Its key is closed: it meters nothing more, and counts until settled. */
  closed?: boolean
}

/**
 * Which gateway key belongs to which session's current turn, and what each turn in progress used.
 * A key is minted per turn and forgotten when the turn ends, so a leaked key dies with its turn.
 * The plan's token and spend limits hold mid-turn: once the org's stored usage plus what its turns
 * in progress used reaches a limit, every further model call of the org's turns is refused and
 * those turns end failed, naming the limit.
 */
export class GatewaySessions {
  private readonly byToken = new Map<string, OpenTurn>()
  private readonly bySession = new Map<string, OpenTurn>()
  /** Turns whose key is closed and whose end is not committed yet, by their (dead) key. */
  private readonly closed = new Map<string, OpenTurn>()

  /**
   * Mints the turn's key, or takes `resumed` up again: a turn an earlier server handed over, whose
   * CLI still holds that key, with what it had used.
   */
  open(opening: TurnOpening, resumed?: { token: string; meter: TurnMeter }): string {
    const token = resumed?.token ?? `gw_${randomBytes(24).toString('base64url')}`
    const open: OpenTurn = {
      opening,
      prices: new Map(opening.models.map((m) => [m.id, m.pricing])),
      meter: resumed ? { ...resumed.meter } : { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0, calls: 0, costUsd: 0 },
      limit: null,
      binding: {
        sessionId: opening.sessionId,
        turn: opening.turn,
        workspace: opening.workspace,
        models: new Set(opening.models.filter((m) => opening.pricedModels !== false || !isPriced(m)).map((m) => m.id)),
        refusal: () => this.refusal(open),
        ...(opening.account !== undefined ? { account: opening.account } : {}),
      },
    }
    this.byToken.set(token, open)
    this.bySession.set(opening.sessionId, open)
    return token
  }

  /**
   * Forgets the key: from now on it is 401, and no later reply is metered to the turn. Returns what
   * the turn used and the limit it crossed. What it used still counts toward its org's limits until
   * `settle`: the runtime settles once the turn's end (and its usage) is committed, or never will be.
   */
  close(token: string): TurnClosed {
    const open = this.byToken.get(token)
    this.byToken.delete(token)
    if (!open) return { usage: null, limit: null }
    open.closed = true
    this.closed.set(token, open)
    return { usage: open.meter.calls > 0 ? open.meter : null, limit: open.limit }
  }

  /** The closed turn's usage is in the ledger now (or never will be): it stops counting here. */
  settle(token: string): void {
    const open = this.closed.get(token)
    this.closed.delete(token)
    if (open && this.bySession.get(open.opening.sessionId) === open) this.bySession.delete(open.opening.sessionId)
  }

  /** What the open turn of this key used so far (a copy), or null. */
  meterOf(token: string): TurnMeter | null {
    const open = this.byToken.get(token)
    return open ? { ...open.meter } : null
  }

  resolve(token: string): GatewayBinding | null {
    return this.byToken.get(token)?.binding ?? null
  }

  /** Adds a metered call to its turn; returns what it cost at the catalog price (0 for no turn in progress). */
  record(usage: MeteredUsage): number {
    const open = this.bySession.get(usage.sessionId)
    // A reply that finished streaming after its turn ended belongs to no turn in progress.
    if (!open || open.closed || (usage.turn !== undefined && usage.turn !== open.opening.turn)) return 0
    const meter = open.meter
    meter.input += usage.input
    meter.output += usage.output
    meter.cacheRead += usage.cacheRead
    meter.cacheWrite += usage.cacheWrite
    meter.calls += 1
    // Priced as turnPatch prices a turn: cache reads are free, cache writes cost as input.
    const price = open.prices.get(usage.model)
    const cost = price ? ((usage.input + usage.cacheWrite) * price.input_per_million + usage.output * price.output_per_million) / 1e6 : 0
    meter.costUsd += cost
    // The call that crosses a limit was already served; the turn fails for having crossed it.
    this.refusal(open)
    return cost
  }

  /**
   * Why this turn may call the model no more, or null. Evaluated per call: the org's stored usage
   * (which other sessions' ended turns raise) plus every turn of the org still in progress.
   */
  private refusal(open: OpenTurn): string | null {
    if (open.limit) return open.limit
    const standing = open.opening.standing()
    if (!standing) return null
    let tokens = 0
    let spend = 0
    for (const other of this.bySession.values()) {
      // Turns on a user's own provider account are not the plan's.
      if (other.opening.orgId !== open.opening.orgId || other.opening.account !== undefined) continue
      tokens += other.meter.input + other.meter.cacheWrite + other.meter.output
      spend += other.meter.costUsd
    }
    const reached = limitReached(standing, { tokens, spend_usd: spend }, ['tokens', 'spend_usd'])
    if (!reached) return null
    open.limit = `${reached.code}: ${reached.message}; the model gateway refuses this turn's further calls`
    return open.limit
  }
}
