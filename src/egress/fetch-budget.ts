import { FetchRefused } from './public-get'

/** What all the caller-named fetches of one create may take together (contract section 11). */
export interface FetchLimits {
  /** Requests, to any host: 200. */
  requests: number
  /** Milliseconds from the first fetch on: 30 s, scaled by AGENTD_TIME_SCALE. */
  ms: number
}

/** The create's fetches used up their budget: no more are made, and the create is refused. */
export class FetchBudgetSpent extends FetchRefused {
  override name = 'FetchBudgetSpent'
}

/**
 * The budget of one create's caller-named fetches, its skills and images together (contract
 * section 11). Every request goes through `run`, which counts it and hands it a signal that fires
 * when the create's time is up: a skill that walks into many folders cannot make more than
 * `requests` requests on the code host's shared token, and a slow or silent host cannot hold the
 * create past `ms`.
 */
export class FetchBudget {
  private made = 0
  private deadline: number | null = null

  constructor(private readonly limits: FetchLimits) {}

  /**
   * Makes one request with `fetch`, given a signal that aborts it when the create's time is up.
   * Throws FetchBudgetSpent instead of making it past either limit, and in place of its error
   * when the time ran out while it was being made.
   */
  async run<T>(fetch: (signal: AbortSignal) => Promise<T>): Promise<T> {
    this.deadline ??= performance.now() + this.limits.ms
    const left = this.deadline - performance.now()
    if (this.made >= this.limits.requests)
      throw new FetchBudgetSpent(`a create's skills and images may take at most ${this.limits.requests} requests to fetch`)
    if (left <= 0) throw this.late()
    this.made++
    const signal = AbortSignal.timeout(Math.ceil(left))
    try {
      return await fetch(signal)
    } catch (err) {
      if (signal.aborted || this.deadline - performance.now() <= 0) throw this.late()
      throw err
    }
  }

  private late(): FetchBudgetSpent {
    return new FetchBudgetSpent(`a create's skills and images may take at most ${Math.round(this.limits.ms / 100) / 10} s to fetch`)
  }
}
