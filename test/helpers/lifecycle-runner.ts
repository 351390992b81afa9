/**
 * Drives one run of the lifecycle model (test/helpers/lifecycle-model.ts) through the real HTTP
 * API of an in-process agentd: every event is caused the way it happens in production (a request,
 * a turn's script reaching its end, a sandbox that cannot start, the idle limit, a restart), and
 * after each one the persisted status history, `status`, `machine_state`, `error`, the HTTP
 * answers and the persisted machine snapshot are compared with the machine's.
 */
import { existsSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import { initialTransition, transition } from 'xstate'
import { transitionTaken } from '../../machines/chart'
import { refusalOf, sessionMachine, statusOf, type SessionMachineEvent, type SessionSnapshot } from '../../machines/session.machine'
import type { ParkOptions, SandboxHandle, SandboxSpec } from '../../sandbox/driver'
import { ProcessDriver } from '../../sandbox/process'
import type { HostDriverOptions } from '../../sandbox/host-driver'
import type { IdentityService } from '../../src/identity/service'
import type { PlanService } from '../../src/plans/service'
import type { SessionService } from '../../src/sessions/service'
import type { SessionStore } from '../../src/session-record/store'
import { STATUS_OF } from '../../src/http/errors'
import { json, req, script } from './http'
import { consequenceOf, FULL, ROWS, SLOT, VARIANTS, type Run } from './lifecycle-model'

/** The prompt of the runs that hold an org's only run slot. */
export const OCCUPIER_PROMPT = 'occupies the run slot'
/**
 * The CLI a run drives: the lifecycle is the same for each harness, and Codex starts a turn in a
 * fraction of the time the Node CLIs take (each harness has its own end-to-end tests). A run with
 * an answer that misses its schema takes Claude Code: Codex hands the schema to the gateway, which
 * enforces it, so such a turn fails there instead of ending in `needs_review`.
 */
const HARNESS = 'harness_2'
const HARNESS_UNPROVEN = 'harness_1'
const SCHEMA = { type: 'object', properties: { verdict: { type: 'string' } }, required: ['verdict'], additionalProperties: false }
/**
 * How long one step may take before the path is said to be stuck: a failure detector, never a speed
 * check. A loaded two-core machine has taken over 30 s for one Claude Code turn among the suite's others.
 */
const WAIT_MS = 150_000

interface Gate {
  waiting: boolean
  open: () => void
  opened: Promise<void>
}

function newGate(): Gate {
  let open!: () => void
  const opened = new Promise<void>((resolve) => (open = resolve))
  return { waiting: false, open, opened }
}

/**
 * The process driver, except that a sandbox start or a park can be held until the test lets it
 * go: the session then really is in `allocating`, or `paused` with its park still landing, for as
 * long as the test needs. What happens when the start is released is the driver's own (a sandbox
 * folder that cannot be made fails it).
 */
export class HeldDriver extends ProcessDriver {
  shouldHold: (id: string) => boolean = () => false
  private readonly gates = new Map<string, Gate>()
  private readonly parks = new Map<string, Gate>()
  private readonly recovering = new Set<string>()

  constructor(options: HostDriverOptions = {}) {
    super({ scope: `lifecycle-${crypto.randomUUID().slice(0, 8)}`, ...options })
  }

  override async create(spec: SandboxSpec): Promise<SandboxHandle> {
    if (!this.recovering.has(spec.id) && this.shouldHold(spec.id)) {
      const gate = this.gate(spec.id)
      gate.waiting = true
      await gate.opened
    }
    return super.create(spec)
  }

  /** After a restart a sandbox is found again through `create`; that is never held. */
  override async recover(spec: SandboxSpec): Promise<SandboxHandle | null> {
    this.recovering.add(spec.id)
    try {
      return await super.recover(spec)
    } finally {
      this.recovering.delete(spec.id)
    }
  }

  /** Until `openPark`, the sandbox's processes are not stopped: a turn can still reach its end. */
  override async park(handle: SandboxHandle, options?: ParkOptions): Promise<void> {
    const gate = this.parks.get(handle.id)
    if (gate) {
      gate.waiting = true
      await gate.opened
    }
    return super.park(handle, options)
  }

  /** The next park of this sandbox waits for `openPark`. */
  holdPark(id: string): void {
    this.parks.set(id, newGate())
  }

  /** The next park of this sandbox, or the one under way, lands only at `openPark`. */
  parkHeld(id: string): boolean {
    return this.parks.has(id)
  }

  parkWaiting(id: string): boolean {
    return this.parks.get(id)?.waiting === true
  }

  openPark(id: string): void {
    this.parks.get(id)?.open()
    this.parks.delete(id)
  }

  waiting(id: string): boolean {
    return this.gates.get(id)?.waiting === true
  }

  /** Lets the held start of this sandbox go on. */
  open(id: string): void {
    this.gate(id).open()
  }

  openAll(): void {
    for (const gate of this.gates.values()) gate.open()
    for (const id of [...this.parks.keys()]) this.openPark(id)
  }

  private gate(id: string): Gate {
    let gate = this.gates.get(id)
    if (!gate) {
      gate = newGate()
      this.gates.set(id, gate)
    }
    return gate
  }
}

export interface Services {
  app: { handle(request: Request): Promise<Response> }
  sessions: SessionService
  store: SessionStore
  identity: IdentityService
  plans: PlanService
}

/** The agentd a run talks to; a restart replaces `services` and `driver`, a crash also `dir`. */
export class World {
  /** Orgs whose session's next sandbox start is held. */
  readonly holdStart = new Map<string, boolean>()
  constructor(
    public services: Services,
    public driver: HeldDriver,
    public dir: string,
  ) {
    this.attach(services, driver, dir)
  }

  attach(services: Services, driver: HeldDriver, dir: string): void {
    Object.assign(this, { services, driver, dir })
    driver.shouldHold = (id) => {
      const row = services.store.get(id)
      if (!row) return false
      return row.prompt === OCCUPIER_PROMPT || this.holdStart.get(row.orgId) === true
    }
  }
}

type Ending = 'ok' | 'fail' | 'unproven'

/** Which prompt (0: the create prompt, n: the n-th follow-up) each turn runs, as the machine moves. */
class PromptTracker {
  current: number | null = null
  private waiting: number[] = []
  sent = 0

  /** Applies a transition; returns the prompt whose turn it ended, if it ended one. */
  apply(event: SessionMachineEvent, actions: string[], next: SessionSnapshot): number | null {
    let ended: number | null = null
    if (event.type === 'message') {
      this.sent++
      if (actions.includes('deliverMessage')) this.current = this.sent
      else this.waiting.push(this.sent)
    }
    if (event.type === 'sandbox.ready') this.current = 0
    if (event.type === 'turn.ended' || event.type === 'service.restarted') ended = this.current
    if (actions.includes('dropQueue')) this.waiting = []
    if (actions.includes('dequeueMessage')) this.current = this.waiting.shift()!
    else if (!next.context.turnActive) this.current = null
    return ended
  }
}

function endingOf(event: SessionMachineEvent): Ending | null {
  if (event.type !== 'turn.ended' || event.stopped) return null
  return event.error ? 'fail' : event.schemaValid === false ? 'unproven' : 'ok'
}

export interface RunResult {
  rows: Set<string>
  states: Set<string>
}

/**
 * A persisted snapshot as far as the machine decides it: all of it, except the error's text, which
 * is the runtime's own (the driver's or the CLI's message); whether there is one is the machine's.
 */
function decided(persisted: unknown): unknown {
  const { context, ...rest } = JSON.parse(JSON.stringify(persisted)) as { context: { error: string | null } }
  return { ...rest, context: { ...context, error: context.error !== null } }
}

/** One session walking one run's events, with the probes (refused commands) at each state. */
export class RunExecutor {
  readonly rows = new Set<string>()
  readonly states = new Set<string>()
  /** Rows whose resulting snapshot was compared with the persisted one. */
  readonly snapshotRows = new Set<string>()
  private model: SessionSnapshot
  /** The persisted snapshot's version the model is at: the create writes 1, each transition one more. */
  private version = 1
  /** Rows taken since the last snapshot comparison whose snapshot is the current one. */
  private uncompared: string[] = []
  private readonly tracker = new PromptTracker()
  private readonly endings: Ending[] = []
  private readonly expectedStatuses: string[] = []
  private orgId = ''
  private token = ''
  private id = ''
  private occupier: string | null = null
  private cursor = 0
  private readonly probed = new Set<number>()
  private readonly malformedTried = new Set<string>()
  private readonly trail: string[] = []

  constructor(
    private readonly world: World,
    readonly run: Run,
    private readonly org: string,
  ) {
    this.model = initialTransition(sessionMachine, VARIANTS[run.variant])[0]
    this.plan()
  }

  get description(): string {
    return `${this.run.group}/${this.run.variant}: ${this.run.events.map(eventLabel).join(' > ') || '(create)'}`
  }

  /** How each prompt's turn must end, read off the run's events before anything is sent. */
  private plan(): void {
    let snapshot = this.model
    const tracker = new PromptTracker()
    const apply = (event: SessionMachineEvent) => {
      const [next, actions] = transition(sessionMachine, snapshot, event)
      const ended = tracker.apply(
        event,
        actions.map((a) => a.type),
        next,
      )
      const ending = endingOf(event)
      if (ended !== null && ending) this.endings[ended] = ending
      snapshot = next
    }
    for (const event of this.run.events) {
      const consequence = consequenceOf(snapshot, event)
      apply(event)
      if (consequence) apply(consequence)
    }
  }

  private promptFor(n: number): string {
    const ending = this.endings[n] ?? 'ok'
    const last =
      ending === 'fail'
        ? { fail: `scripted failure of prompt ${n}` }
        : ending === 'unproven'
          ? { answer: 'an answer without the structured part' }
          : VARIANTS[this.run.variant].hasSchema
            ? { structured: { verdict: `prompt ${n}` } }
            : { answer: `answer to prompt ${n}` }
    // The turn waits for its gate file in the workspace: it ends when the path says it does.
    return script([{ bash: `until [ -e .gate-${n} ]; do sleep 0.05; done` }, last])
  }

  private call(method: string, path: string, body?: unknown) {
    return this.world.services.app.handle(req(method, path, { token: this.token, body }))
  }

  private get path() {
    return `/o/${this.org}/p/_/sessions/${this.id}`
  }

  private fail(message: string): never {
    throw new Error(`${this.description}\n  after: ${this.trail.join(' > ') || '(nothing)'}\n  ${message}`)
  }

  private async waitFor<T>(what: string, read: () => T | Promise<T>, done: (value: T) => boolean, timeoutMs = WAIT_MS): Promise<T> {
    const start = Date.now()
    for (;;) {
      const value = await read()
      if (done(value)) return value
      if (Date.now() - start > timeoutMs) this.fail(`timed out waiting for ${what}; last: ${JSON.stringify(value).slice(0, 400)}`)
      await Bun.sleep(25)
    }
  }

  /** Creates the run's org (one run slot) and signs the walker in. */
  setUp(): void {
    const identity = this.world.services.identity
    this.orgId = identity.createOrg(this.org).id
    this.token = identity.createUser(this.org, 'walker@lifecycle.test', 'admin').token
    this.world.services.plans.setPlan(this.org, { maxConcurrent: 1 })
  }

  /** Creates the session and walks the events before `stop` (a restart point), or all of them. */
  async walk(stop = this.run.events.length): Promise<void> {
    if (!this.id) await this.create()
    while (this.cursor < stop) {
      await this.probe(this.cursor)
      await this.step(this.run.events[this.cursor]!)
      this.cursor++
    }
    await this.probe(this.cursor)
  }

  /** The end of a run: what follows by itself is awaited, then the session is cancelled if live. */
  async finish(): Promise<void> {
    for (;;) {
      const natural = this.naturalNext()
      if (!natural) break
      if (natural.type === 'sandbox.parked') this.world.driver.openPark(this.id)
      this.apply(natural)
      await this.observe(true)
    }
    await this.observe(true)
    const status = statusOf(this.model)
    if (['queued', 'allocating', 'running', 'paused'].includes(status)) {
      const res = await this.call('PATCH', this.path, { status: 'cancelled' })
      if (res.status !== 200) this.fail(`clean-up cancel answered ${res.status}`)
    }
    await this.vacate()
    this.world.driver.open(this.id)
  }

  /** Events the system produces on its own from the model's state, when the run stops there. */
  private naturalNext(): SessionMachineEvent | null {
    const { value, context } = this.model
    if (value === 'allocating' && !this.world.holdStart.get(this.orgId)) return { type: 'sandbox.ready' }
    if (value === 'running' && context.machineState === 'resuming') return { type: 'sandbox.woken' }
    if (value === 'paused' && context.machineState === 'pausing') return { type: 'sandbox.parked' }
    return null
  }

  /** Whether the state after `index` events must stay put until the test acts. */
  private heldAt(index: number): boolean {
    if ((this.run.probes[index]?.length ?? 0) > 0) return true
    // A park the driver holds lands only once the test lets it (sandbox.parked, or finish).
    const parkHeld = this.world.driver.parkHeld(this.id)
    // Where the run ends, the state is held unless something follows by itself (see finish).
    if (index === this.run.events.length) return this.naturalNext() === null || parkHeld
    if (this.run.events[index]?.type === 'sandbox.parked' && parkHeld) return true
    return !isImmediate(this.run.events[index], this.model)
  }

  private async create(): Promise<void> {
    const variant = VARIANTS[this.run.variant]
    const first = this.run.events[0]
    // The initial `queued` is held by a full org: another run takes the only slot first.
    const heldQueued = (this.run.probes[0]?.length ?? 0) > 0 || first?.type !== 'admit'
    if (heldQueued) await this.occupy()
    else this.world.holdStart.set(this.orgId, this.mustHoldAllocating(1))
    const res = await this.call('POST', `/o/${this.org}/p/_/sessions`, {
      agent: Object.values(this.endings).includes('unproven') ? HARNESS_UNPROVEN : HARNESS,
      prompt: this.promptFor(0),
      persistence: variant.persistence,
      mode: variant.mode,
      ...(variant.hasSchema ? { output_schema: SCHEMA } : {}),
    })
    if (res.status !== 202) this.fail(`create answered ${res.status}: ${await res.text()}`)
    const body = await json(res)
    this.id = body.execution_id
    this.trail.push('create')
    this.states.add(statusOf(this.model))
    this.expectedStatuses.push(statusOf(this.model))
    if (!heldQueued) {
      // Admission happens inside create: the slot is free.
      this.apply(first!)
      this.cursor = 1
    }
    if (body.status !== statusOf(this.model)) this.fail(`create answered status ${body.status}, the machine says ${statusOf(this.model)}`)
    await this.observe(this.heldAt(this.cursor))
  }

  private mustHoldAllocating(index: number): boolean {
    return (this.run.probes[index]?.length ?? 0) > 0 || this.run.events[index]?.type !== 'sandbox.ready'
  }

  /** After a mid-turn pause: the park waits when the test has something to do before it lands. */
  private mustHoldPark(index: number): boolean {
    return (this.run.probes[index]?.length ?? 0) > 0 || this.run.events[index]?.type === 'turn.ended'
  }

  /** Another run takes the org's only slot (its sandbox start held, so it stays in `allocating`). */
  private async occupy(): Promise<void> {
    if (this.occupier) return
    const res = await this.call('POST', `/o/${this.org}/p/_/sessions`, { agent: HARNESS, prompt: OCCUPIER_PROMPT })
    const body = await json(res)
    if (res.status !== 202 || body.status !== 'allocating') this.fail(`the occupying run answered ${res.status} ${body.status}`)
    this.occupier = body.execution_id as string
    await this.waitFor('the occupying run to hold its slot', () => this.world.driver.waiting(this.occupier!), Boolean)
  }

  /** The occupying run is cancelled: its slot is free, and queued runs of the org are admitted. */
  private async vacate(): Promise<void> {
    if (!this.occupier) return
    const res = await this.call('PATCH', `/o/${this.org}/p/_/sessions/${this.occupier}`, { status: 'cancelled' })
    if (res.status !== 200) this.fail(`cancelling the occupying run answered ${res.status}`)
    this.world.driver.open(this.occupier)
    this.occupier = null
  }

  /** The org is made full or given a free slot, when that decides the event's transition. */
  private async slots(event: SessionMachineEvent): Promise<void> {
    if (!('activeRuns' in event) || event.type === 'admit') return
    const full = transitionTaken(this.model, { ...event, ...FULL }, sessionMachine, ROWS)
    const free = transitionTaken(this.model, { ...event, ...SLOT }, sessionMachine, ROWS)
    if (full === free) return
    if (event.activeRuns >= (event.limit ?? Infinity)) await this.occupy()
    else await this.vacate()
  }

  /** Tries each refused command at this state: the answer is the machine's refusal, nothing changes. */
  private async probe(index: number): Promise<void> {
    if (this.probed.has(index)) return
    this.probed.add(index)
    for (const event of this.run.probes[index] ?? []) {
      await this.slots(event)
      const refusal = refusalOf(transition(sessionMachine, this.model, event)[1])
      if (!refusal) this.fail(`probe ${eventLabel(event)} is not refused by the machine`)
      const row = transitionTaken(this.model, event, sessionMachine, ROWS)!
      const res = await this.command(event, 'probe')
      const body = await json(res)
      if (res.status !== STATUS_OF[refusal.kind] || body.error !== refusal.message || body.code !== refusal.code) {
        this.fail(
          `${eventLabel(event)} in ${statusOf(this.model)}: answered ${res.status} ${JSON.stringify(body)}, the machine refuses with ${JSON.stringify(refusal)}`,
        )
      }
      this.rows.add(row.key)
      this.uncompared.push(row.key)
      this.trail.push(`(${eventLabel(event)} → ${STATUS_OF[refusal.kind]})`)
    }
    if ((this.run.probes[index]?.length ?? 0) === 0) return
    const status = statusOf(this.model)
    if (!this.malformedTried.has(status)) {
      // Commands that are no event at all are 400 in every state (spec 4.1, 4.3).
      this.malformedTried.add(status)
      for (const [method, path, body] of [
        ['PATCH', this.path, { status: 'completed' }],
        ['POST', `${this.path}/messages`, { content: '' }],
      ] as const) {
        const res = await this.call(method, path, body)
        if (res.status !== 400) this.fail(`${method} ${JSON.stringify(body)} in ${status} answered ${res.status}, not 400`)
      }
    }
    await this.observe(true)
  }

  private command(event: SessionMachineEvent, content: string): Promise<Response> {
    switch (event.type) {
      case 'cancel':
        return this.call('PATCH', this.path, { status: 'cancelled' })
      case 'pause':
        return this.call('PATCH', this.path, { status: 'paused' })
      case 'resume':
        return this.call('PATCH', this.path, { status: 'running' })
      case 'stop_turn':
        return this.call('PATCH', this.path, { status: 'stop_turn' })
      case 'message':
        return this.call('POST', `${this.path}/messages`, { content })
      case 'fork':
        return this.call('POST', `${this.path}/fork`)
      default:
        throw new Error(`${event.type} is not a command`)
    }
  }

  /** Causes one event the way it happens for real, then checks the outcome against the machine. */
  private async step(event: SessionMachineEvent): Promise<void> {
    const before = this.model
    const [next, actions] = transition(sessionMachine, before, event)
    const types = actions.map((a) => a.type)
    switch (event.type) {
      case 'admit':
        // The session waits behind the occupying run; cancelling that run frees the slot.
        if (next.value === 'allocating') this.world.holdStart.set(this.orgId, this.mustHoldAllocating(this.cursor + 1))
        await this.vacate()
        break
      case 'sandbox.ready':
        if (this.world.driver.waiting(this.id)) this.world.driver.open(this.id)
        break
      case 'sandbox.failed':
        if (before.value === 'allocating') {
          // The sandbox cannot start: its folder's path is taken by a file, so the driver's mkdir fails.
          await this.waitFor('the sandbox start', () => this.world.driver.waiting(this.id), Boolean)
          writeFileSync(join(this.world.dir, 'sandboxes', this.id), 'not a folder')
          this.world.driver.open(this.id)
        }
        // In `running`, the wake of a sandbox whose disk was lost fails on its own.
        break
      case 'turn.ended': {
        // A running turn reaches the end of its script once its gate opens, and so does a paused
        // one whose park is held (nothing stopped it yet); a parked one meets the turn time limit.
        const parkLanding = before.value === 'paused' && before.context.machineState === 'pausing'
        if (before.value !== 'running' && !parkLanding) break
        if (parkLanding) await this.waitFor('the park to be held', () => this.world.driver.parkWaiting(this.id), Boolean)
        if (this.tracker.current === null) this.fail('a turn ends but no prompt is running')
        writeFileSync(join(this.world.dir, 'sandboxes', this.id, 'workspace', `.gate-${this.tracker.current}`), '')
        break
      }
      case 'sandbox.parked':
        this.world.driver.openPark(this.id)
        break
      case 'cancel':
      case 'pause':
      case 'resume':
      case 'stop_turn':
      case 'fork':
      case 'message': {
        if (event.type === 'pause' && next.context.machineState === 'pausing' && this.mustHoldPark(this.cursor + 1))
          this.world.driver.holdPark(this.id)
        await this.slots(event)
        const content = event.type === 'message' ? this.promptFor(this.tracker.sent + 1) : ''
        const res = await this.command(event, content)
        await this.expectAnswer(event, res, types, next)
        break
      }
      // sandbox.woken, idle.timeout, service.restarted: they happen.
    }
    this.apply(event)
    await this.observe(this.heldAt(this.cursor + 1))
  }

  private async expectAnswer(event: SessionMachineEvent, res: Response, types: string[], next: SessionSnapshot): Promise<void> {
    const body = await json(res)
    if (event.type === 'fork') {
      // A new session resting with a copy of this one's sandbox; this one is left as it was (observe checks).
      const fork = {
        status: body.status,
        machine_state: body.machine_state,
        turns_count: body.turns_count,
        from: body.forked_from?.session,
      }
      if (res.status !== 202 || !isDeepStrictEqual(fork, { status: 'completed', machine_state: 'paused', turns_count: 0, from: this.id }))
        this.fail(`fork in ${statusOf(this.model)} answered ${res.status} ${JSON.stringify(body)}`)
      return
    }
    const expected =
      event.type === 'cancel'
        ? [200, { ok: true, status: 'cancelled' }]
        : event.type === 'stop_turn'
          ? [200, { ok: true, status: 'stop_turn_confirmed' }]
          : event.type === 'message'
            ? types.includes('deliverMessage')
              ? [200, { ok: true, status: 'message_sent' }]
              : [202, { ok: true, status: 'queued', message_id: body.message_id, position: next.context.queued }]
            : [202, { operation_id: body.operation_id }]
    const [status, shape] = expected as [number, Record<string, unknown>]
    const ok =
      res.status === status &&
      JSON.stringify(body) === JSON.stringify(shape) &&
      Object.values(body).every((v) => v !== undefined && v !== null)
    if (!ok)
      this.fail(
        `${eventLabel(event)} in ${statusOf(this.model)} answered ${res.status} ${JSON.stringify(body)}, expected ${status} ${JSON.stringify(shape)}`,
      )
  }

  /** Moves the model by one event (and its consequence), counting the rows it takes. */
  private apply(event: SessionMachineEvent): void {
    const consequence = consequenceOf(this.model, event)
    for (const e of consequence ? [event, consequence] : [event]) {
      const before = this.model
      const row = transitionTaken(before, e, sessionMachine, ROWS)
      if (!row) this.fail(`the machine ignores ${eventLabel(e)} in ${statusOf(before)}`)
      const [next, actions] = transition(sessionMachine, before, e)
      this.tracker.apply(
        e,
        actions.map((a) => a.type),
        next,
      )
      const status = statusOf(next)
      if (status !== statusOf(before) || e.type === 'turn.ended') this.expectedStatuses.push(status)
      this.model = next
      // A transition that changes nothing stored (a fork, a stop_turn's request) writes nothing (the actor's `writesNothing`).
      const persisted = (snapshot: SessionSnapshot) => JSON.parse(JSON.stringify(sessionMachine.getPersistedSnapshot(snapshot)))
      const unchanged = status === statusOf(before) && e.type !== 'turn.ended' && isDeepStrictEqual(persisted(next), persisted(before))
      if (!unchanged) this.version++
      this.uncompared = [row.key]
      this.states.add(status)
      this.rows.add(row.key)
      this.trail.push(`${eventLabel(e)} → ${status}`)
    }
  }

  /** Applies an event caused by the environment as a whole (a restart), then checks the session. */
  async happened(event: SessionMachineEvent): Promise<void> {
    if (this.run.events[this.cursor] !== event) this.fail(`expected ${eventLabel(this.run.events[this.cursor]!)} at the restart`)
    this.apply(event)
    this.cursor++
    await this.observe(this.heldAt(this.cursor))
  }

  get nextEvent(): SessionMachineEvent | undefined {
    return this.run.events[this.cursor]
  }

  get sessionId(): string {
    return this.id
  }

  /**
   * Compares the persisted status events and snapshot with the machine's, and when the session
   * stays in this state (`held`), its status, machine_state and error too.
   */
  private async observe(held: boolean): Promise<void> {
    const expected = this.expectedStatuses
    const store = () => this.world.services.store
    const persisted = () =>
      store()
        .allEvents(this.id)
        .filter((e) => e.kind === 'status')
        .map((e) => String(e.data.status))
    await this.waitFor(`status events ${expected.join(', ')}`, persisted, (real) => {
      const prefix = real.slice(0, expected.length)
      if (prefix.some((s, i) => s !== expected[i])) this.fail(`status events ${real.join(', ')}, the machine says ${expected.join(', ')}`)
      if (held && real.length > expected.length)
        this.fail(`status events ${real.join(', ')} went past the machine's ${expected.join(', ')}`)
      return real.length >= expected.length
    })
    await this.expectSnapshot(held)
    if (!held) return
    const want = { status: statusOf(this.model), machine_state: this.model.context.machineState, error: this.model.context.error !== null }
    await this.waitFor(
      `GET to show ${JSON.stringify(want)}`,
      async () => {
        const body = await json(await this.call('GET', this.path))
        return { status: body.status, machine_state: body.machine_state, error: body.error !== null }
      },
      (got) => JSON.stringify(got) === JSON.stringify(want),
    )
  }

  /**
   * The snapshot shows what HTTP cannot: where a paused session will rest, what is queued, whether
   * a turn is still on. It is compared once the session has committed as many transitions as the
   * model took; a session that does not stay put may be past that already, and is compared at
   * its next held state instead.
   */
  private async expectSnapshot(held: boolean): Promise<void> {
    const stored = (await this.waitFor(
      `snapshot version ${this.version}`,
      () => this.world.services.store.snapshotOf(this.id),
      (s) => s !== null && s.version >= this.version,
    ))!
    if (stored.version > this.version) {
      if (held) this.fail(`snapshot version ${stored.version} went past the machine's ${this.version}: ${JSON.stringify(stored.snapshot)}`)
      this.uncompared = []
      return
    }
    const want = decided(sessionMachine.getPersistedSnapshot(this.model))
    const got = decided(stored.snapshot)
    if (!isDeepStrictEqual(got, want)) this.fail(`persisted snapshot ${JSON.stringify(got)}, the machine says ${JSON.stringify(want)}`)
    for (const key of this.uncompared) this.snapshotRows.add(key)
    this.uncompared = []
  }

  /** The run's session folder is gone, as if its disk was lost while agentd was down. */
  loseDisk(): void {
    rmSync(join(this.world.dir, 'sandboxes', this.id, 'workspace'), { recursive: true, force: true })
    if (existsSync(join(this.world.dir, 'sandboxes', this.id, 'workspace'))) this.fail('the workspace could not be removed')
  }
}

/** Events that follow at once, by themselves, so their state cannot be held for the test. */
function isImmediate(event: SessionMachineEvent | undefined, before: SessionSnapshot): boolean {
  if (!event) return false
  // Held only when the test has something to do in `allocating` (see mustHoldAllocating).
  if (event.type === 'sandbox.ready') return true
  if (event.type === 'sandbox.parked' || event.type === 'sandbox.woken') return true
  if (event.type === 'sandbox.failed') return before.value === 'running'
  return false
}

export function eventLabel(event: SessionMachineEvent): string {
  if (event.type === 'turn.ended')
    return `turn.ended(${event.stopped ? 'stopped' : event.error ? 'error' : event.schemaValid === false ? 'unproven' : 'answer'})`
  if ('activeRuns' in event && event.type !== 'admit')
    return `${event.type}(${event.activeRuns >= (event.limit ?? Infinity) ? 'full' : 'slot'})`
  return event.type
}
