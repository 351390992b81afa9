import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { SandboxDriver } from '../../sandbox/driver'
import { SESSION_STATUSES, type SessionStatus } from '../domain/status'

/** What the metrics read at each scrape, rather than keep a second count of. */
export interface MetricsSources {
  sessionsByStatus: () => Map<SessionStatus, number>
  /** Events written to the session log since the start. */
  eventsWritten: () => number
  capacity: { maxSandboxes: number; maxStarting: number }
  /** The runsc agentd runs, when the gVisor driver is in use (asked at each scrape). */
  runsc?: () => { version: string; platform: string; source: string } | null
  /** The nodes of this node's region as recorded (none for a node alone). */
  nodes?: () => { name: string; maxSandboxes: number; heardSecondsAgo: number; lost: boolean }[]
}

type SandboxOp = 'create' | 'park' | 'wake'

const SANDBOX_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
const WAIT_BUCKETS = [0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 1800]

/**
 * agentd's Prometheus metrics (prom-client), on a registry of its own so two servers in one
 * process (tests) never share one. Counts that the database already holds (sessions by status,
 * queue depth, sandboxes held) are read at scrape time; events are counted as they happen.
 */
export class Metrics {
  readonly registry = new Registry()
  private readonly turns: Counter<'outcome'>
  private readonly queueWait: Histogram
  private readonly sandboxOps: Record<SandboxOp, Histogram>
  private readonly sandboxFailures: Counter<'op'>
  private readonly webhookAttempts: Counter<'outcome'>
  private readonly tokens: Counter<'model' | 'kind'>
  private readonly cost: Counter<'model'>

  constructor(sources: MetricsSources) {
    const registers = [this.registry]
    new Gauge({
      name: 'agentd_sessions',
      help: 'Sessions by status, every org',
      labelNames: ['status'],
      registers,
      collect() {
        const counts = sources.sessionsByStatus()
        for (const status of SESSION_STATUSES) this.set({ status }, counts.get(status) ?? 0)
      },
    })
    new Gauge({
      name: 'agentd_queue_depth',
      help: 'Sessions waiting queued for a run slot or for the host',
      registers,
      collect() {
        this.set(sources.sessionsByStatus().get('queued') ?? 0)
      },
    })
    new Gauge({
      name: 'agentd_host_sandboxes_in_use',
      help: 'Sandboxes the host holds (allocating, running or paused) against agentd_host_sandboxes_max',
      registers,
      collect() {
        const counts = sources.sessionsByStatus()
        this.set((counts.get('allocating') ?? 0) + (counts.get('running') ?? 0) + (counts.get('paused') ?? 0))
      },
    })
    new Gauge({
      name: 'agentd_runsc_info',
      help: 'The runsc gVisor sandboxes run on (absent on other drivers): its version, platform and where it came from',
      labelNames: ['version', 'platform', 'source'],
      registers,
      collect() {
        const runsc = sources.runsc?.()
        if (runsc) this.set({ version: runsc.version, platform: runsc.platform, source: runsc.source }, 1)
      },
    })
    // A region's nodes (contract section 12): recreated at each scrape, so a node no longer recorded goes.
    new Gauge({
      name: 'agentd_region_node_up',
      help: 'Each node of the region: 1 while heard from within AGENTD_NODE_TIMEOUT_S, 0 once lost',
      labelNames: ['node'],
      registers,
      collect() {
        this.reset()
        for (const node of sources.nodes?.() ?? []) this.set({ node: node.name }, node.lost ? 0 : 1)
      },
    })
    new Gauge({
      name: 'agentd_region_node_heard_seconds',
      help: "Seconds since each node of the region was last heard from (its heartbeat's record)",
      labelNames: ['node'],
      registers,
      collect() {
        this.reset()
        for (const node of sources.nodes?.() ?? []) this.set({ node: node.name }, node.heardSecondsAgo)
      },
    })
    new Gauge({
      name: 'agentd_region_node_sandboxes_max',
      help: 'AGENTD_MAX_SANDBOXES of each node of the region',
      labelNames: ['node'],
      registers,
      collect() {
        this.reset()
        for (const node of sources.nodes?.() ?? []) this.set({ node: node.name }, node.maxSandboxes)
      },
    })
    new Gauge({ name: 'agentd_host_sandboxes_max', help: 'Sandboxes the host runs at once (AGENTD_MAX_SANDBOXES)', registers }).set(
      sources.capacity.maxSandboxes,
    )
    new Gauge({ name: 'agentd_host_starting_max', help: 'Sandboxes the host starts at once (AGENTD_MAX_STARTING)', registers }).set(
      sources.capacity.maxStarting,
    )
    let eventsSeen = 0
    new Counter({
      name: 'agentd_events_total',
      help: 'Session events written (status, harness output, logs)',
      registers,
      collect() {
        const now = sources.eventsWritten()
        this.inc(Math.max(0, now - eventsSeen))
        eventsSeen = now
      },
    })
    this.turns = new Counter({
      name: 'agentd_turns_total',
      help: 'Turns ended, by the status they ended in',
      labelNames: ['outcome'],
      registers,
    })
    this.queueWait = new Histogram({
      name: 'agentd_queue_wait_seconds',
      help: 'Time a run waited queued before its sandbox start began',
      buckets: WAIT_BUCKETS,
      registers,
    })
    // One histogram per operation, unlabelled: a server runs one driver, and failures count apart.
    const histogram = (op: SandboxOp) =>
      new Histogram({
        name: `agentd_sandbox_${op}_seconds`,
        help: `Sandbox ${op} latency, of those that succeeded`,
        buckets: SANDBOX_BUCKETS,
        registers,
      })
    this.sandboxOps = { create: histogram('create'), park: histogram('park'), wake: histogram('wake') }
    this.sandboxFailures = new Counter({
      name: 'agentd_sandbox_failures_total',
      help: 'Sandbox creates, parks and wakes that failed',
      labelNames: ['op'],
      registers,
    })
    this.webhookAttempts = new Counter({
      name: 'agentd_webhook_attempts_total',
      help: 'Webhook delivery attempts, by outcome',
      labelNames: ['outcome'],
      registers,
    })
    this.tokens = new Counter({
      name: 'agentd_gateway_tokens_total',
      help: 'Tokens through the model gateway, by model and kind',
      labelNames: ['model', 'kind'],
      registers,
    })
    this.cost = new Counter({
      name: 'agentd_gateway_cost_usd_total',
      help: 'Model spend through the gateway at catalog prices, by model',
      labelNames: ['model'],
      registers,
    })
  }

  turnEnded(outcome: SessionStatus): void {
    this.turns.inc({ outcome })
  }

  /** A queued run was admitted after waiting `ms`. */
  admitted(ms: number): void {
    this.queueWait.observe(Math.max(0, ms) / 1000)
  }

  webhookAttempt(outcome: 'delivered' | 'retrying' | 'failed'): void {
    this.webhookAttempts.inc({ outcome })
  }

  gatewayCall(usage: { model: string; input: number; output: number; cacheRead: number; cacheWrite: number }, costUsd: number): void {
    const { model } = usage
    for (const kind of ['input', 'output', 'cacheRead', 'cacheWrite'] as const)
      if (usage[kind] > 0) this.tokens.inc({ model, kind }, usage[kind])
    if (costUsd > 0) this.cost.inc({ model }, costUsd)
  }

  /**
   * The driver with its create, park and wake timed. Every other member is the driver's own, so
   * the rest of agentd (and tests that reach into the driver) see no difference.
   */
  timed(driver: SandboxDriver): SandboxDriver {
    const { sandboxOps, sandboxFailures } = this
    return new Proxy(driver, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver)
        if (typeof value !== 'function') return value
        if (prop !== 'create' && prop !== 'park' && prop !== 'wake') return value.bind(target)
        return async (...args: unknown[]) => {
          const started = performance.now()
          try {
            const result = await value.apply(target, args)
            sandboxOps[prop].observe((performance.now() - started) / 1000)
            return result
          } catch (err) {
            sandboxFailures.inc({ op: prop })
            throw err
          }
        }
      },
    })
  }

  text(): Promise<string> {
    return this.registry.metrics()
  }

  get contentType(): string {
    return this.registry.contentType
  }
}
