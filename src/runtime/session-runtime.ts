import type { Harness } from '../domain/harness'
import type { TurnOutcome } from '../harness/harness'
import type { SandboxHandle } from '../../sandbox/driver'
import type { GatewaySessions } from './gateway-bindings'
import type { SessionInbox } from '../session-record/ports'
import { LOG_CAP_BYTES } from '../session-record/event-log'
import type { SessionRow } from '../session-record/store'
import { dropHandover, loggedOf, reclaim, StoredPrefix } from './handover'
import { endedTurn, interrupt, turnDeadline, turnOpening, type TurnRun } from './turn-end'
import { turnOutput, type TurnSummary } from './turn-output'
import { failedOutcome, followTurn, type RunningTurn } from './turn-runner'
import { firstTurnPrompt, turnSpec } from './turn-spec'
import { LiveSessions, type LogWriter } from './live'
import { SessionSandboxes } from './sandboxes'
import { sandboxVariables } from './environment'
import type { RuntimeDeps } from './runtime-deps'
import { ProjectSetup } from './project-setup'
import { WarmSandboxes } from './warm-sandboxes'
import { stopTurns } from './stop'
import { launchTurn, StartedClis, warmCliDeps } from './started-cli'
import type { TurnMeter } from './gateway-bindings'

/** A machine action as `transition()` returns it. */
interface ActionObject {
  type: string
  params?: unknown
}

/** A turn's meter before its first model call. */
const noUse = (): TurnMeter => ({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0, calls: 0, costUsd: 0 })

// Actions the session actor carries out inside the transition's transaction, not here.
const TRANSACTIONAL = new Set(['enqueueMessage', 'deliverMessage', 'dequeueMessage', 'dropQueue', 'refuse'])

/**
 * Carries out the machine's actions after their transition is committed: sandboxes, turns, and
 * admission. Results come back to the machine as events (`sandbox.ready`, `turn.ended`, …).
 */
export class SessionRuntime {
  private readonly live: LiveSessions
  private readonly sandboxes: SessionSandboxes
  /** Sandboxes booted ahead of the sessions that take them (AGENTD_WARM_SANDBOXES). */
  readonly warm: WarmSandboxes
  /** CLIs started ahead in those sandboxes (AGENTD_WARM_CLI), null when none are. */
  private readonly startedClis: StartedClis | null
  /** Shutting down: nothing new starts. */
  closing = false
  /** Sandbox copies under way for forks, by the fork's id (`forked` awaits one). */
  private readonly forks = new Map<string, Promise<{ conversation: boolean }>>()

  /** Project environments: prebuilt images, variables and setup (project-setup.ts). */
  private readonly project: ProjectSetup

  /** Where sandbox and turn results go: the session actor, connected once it exists (it carries out through this runtime). */
  private inbox: SessionInbox = {
    apply: () => {
      throw new Error('the session runtime is not connected to the session actor')
    },
    admit: () => {},
  }

  constructor(private readonly deps: RuntimeDeps) {
    this.project = new ProjectSetup({ ...deps, sessionLog: (id, turn, text) => this.log(id, turn, text, 'setup') })
    this.live = new LiveSessions(deps.log)
    this.sandboxes = new SessionSandboxes(
      deps,
      this.live,
      this.project,
      () => this.inbox,
      () => this.closing,
      {
        claim: (id) => this.warm.claim(id),
        discard: (handle) => this.warm.discard(handle),
        takeStarted: (id) => this.warm.takeStarted(id),
        dropStarted: (started) => this.warm.dropStarted(started),
      },
    )
    const started = deps.startedCli
    this.startedClis = started
      ? new StartedClis(deps.driver, deps.adapters, started.models, (line) => deps.log(line), started.askAgainMs)
      : null
    const busy = () => this.live.all().some(([, live]) => live.turn !== undefined)
    this.warm = new WarmSandboxes(
      { ...deps, spec: (id) => this.sandboxes.plainSpec(id), log: (line) => deps.log(line), ...warmCliDeps(this.startedClis, busy) },
      deps.warmSandboxes ?? 0,
    )
  }

  /** The gateway asks for a started CLI's first message (held until a session takes its sandbox). */
  firstMessage(key: string, signal: AbortSignal): Promise<string | null> | null {
    return this.startedClis?.firstMessage(key, signal) ?? null
  }

  /** The id for a new session: one whose sandbox is booted ahead when a warm one waits. */
  newSessionId(harness?: Harness): string {
    return this.warm.sessionId(harness)
  }

  /** A create stored no session under `id` (refused, or a replay): the warm sandbox it took, if any, is destroyed. */
  unusedSessionId(id: string): void {
    this.warm.giveBack(id)
  }

  connect(inbox: SessionInbox): void {
    this.inbox = inbox
  }

  carryOut(id: string, actions: ActionObject[]): void {
    // While shutting down, nothing new starts; what runs is being stopped.
    if (this.closing) return
    for (const action of actions) {
      switch (action.type) {
        case 'provisionSandbox':
          this.live.serial(id, 'provision', () => this.sandboxes.provision(id))
          break
        case 'startTurn':
          this.live.serial(id, 'start a turn', () => this.runTurn(id))
          break
        case 'stopTurn':
          interrupt(this.live.get(id)?.turn)
          break
        case 'killTurn':
          this.live.of(id).turn?.process.kill('SIGKILL')
          break
        case 'parkSandbox':
          this.live.serial(id, 'park', () => this.sandboxes.park(id, true))
          break
        case 'wakeSandbox':
          this.live.serial(id, 'wake', () => this.sandboxes.wake(id))
          break
        case 'releaseSandbox': // params.keep: a resumable session parks its sandbox instead
        case 'destroySandbox':
          if ((action.params as { keep?: boolean } | undefined)?.keep)
            this.live.serial(id, 'park after the turn', () => this.sandboxes.park(id, false))
          else this.live.serial(id, 'destroy', () => this.sandboxes.destroy(id))
          break
        case 'forkSandbox': {
          const { into } = action.params as { into: string }
          // After the session's earlier operations (its park after the turn): the copy is of the parked sandbox.
          const copy = new Promise<{ conversation: boolean }>((resolve, reject) =>
            this.live.serial(id, 'fork', () => this.sandboxes.fork(id, into).then(resolve, reject)),
          )
          copy.catch(() => {}) // answered by `forked`
          this.forks.set(into, copy)
          break
        }
        case 'admitQueued':
          queueMicrotask(() => this.closing || this.inbox.admit())
          break
        default:
          if (!TRANSACTIONAL.has(action.type)) this.deps.log(`no effect for action ${action.type}`, { session: id })
      }
    }
  }

  /** At start: removes the sandboxes no live session (`owners`) holds any more. */
  async sweep(owners: string[]): Promise<void> {
    await this.deps.driver.sweep(owners)
  }

  /**
   * Resolves once the fork `into`'s sandbox is copied (its `forkSandbox` action), saying whether
   * the copy goes on with the CLI's conversation (SessionSandboxes.fork); rejects with why it could not be copied.
   */
  async forked(into: string): Promise<{ conversation: boolean }> {
    const copy = this.forks.get(into)
    if (!copy) throw new Error('no copy of a sandbox was started for this fork (the server is stopping)')
    try {
      return await copy
    } finally {
      this.forks.delete(into)
    }
  }

  /** A fork whose session was not stored after all: its copied sandbox goes. */
  discard(into: string): void {
    this.live.serial(into, 'destroy', () => this.sandboxes.destroy(into))
  }

  /** Resolves once the running turn's CLI has exited after a stop_turn, or rejects on timeout. */
  async stopped(id: string, timeoutMs: number): Promise<void> {
    const turn = this.live.get(id)?.turn
    if (!turn) return
    const timer = Bun.sleep(timeoutMs).then(() => 'timeout' as const)
    if ((await Promise.race([turn.process.exited.then(() => 'exited' as const), timer])) === 'timeout')
      throw new Error('the harness did not stop in time')
  }

  /** Starts the session's next turn; its end comes back as `turn.ended`, without holding the queue. */
  private async runTurn(id: string): Promise<void> {
    const row = this.deps.store.get(id)
    if (!row) return
    const turn = row.turnsCount + 1
    const adapter = this.deps.adapters[row.harness as Harness]
    let handle: SandboxHandle
    try {
      handle = await this.sandboxes.handleOf(id)
    } catch (err) {
      this.inbox.apply(id, { type: 'sandbox.failed', error: (err as Error).message })
      return
    }
    // Drivers ask for a wake before every turn: a no-op on a running sandbox, a restart of a
    // stopped one (gVisor after an out-of-memory kill).
    let oomBefore = 0
    try {
      await this.deps.driver.wake(handle)
      oomBefore = (await this.deps.driver.stats(handle)).oomKills
    } catch (err) {
      this.inbox.apply(id, { type: 'sandbox.failed', error: `the sandbox could not be woken: ${(err as Error).message}` })
      return
    }
    // A CLI started ahead in the warm sandbox runs the first turn when the session fits it.
    const started =
      turn === 1 && !row.forkedFromSession ? (this.startedClis?.take(this.live.of(id), row, this.deps.mcpServers(id).length) ?? null) : null
    // The key serves this turn only, the harness's catalog models only, within the org's plan.
    const terms = await this.deps.turnTerms(row).catch((err) => {
      if (started) this.startedClis!.drop(started)
      throw err
    })
    const opening = turnOpening(this.deps.catalog, row, turn, handle, terms)
    const token = this.deps.gatewaySessions.open(opening, started ? { token: started.key, meter: noUse() } : undefined)
    const run: TurnRun = { turn, token, handle, oomBefore, startedAt: this.deps.now(), prompt: '' }
    const summary = { last: null as string | null }
    // Until it is handed its message, a started CLI taken here is ended with any failure.
    let handed = false
    const dropStarted = () => started && !handed && this.startedClis!.drop(started)
    try {
      if (!adapter) throw new Error(`${row.harness} has no runner on this server`)
      const env = await this.project.of(row)
      this.deps.beforeTurn(row, handle, token)
      let prompt: string | undefined
      let placedFiles = false
      // A fork's first turn goes on from its source's conversation and workspace: nothing is set up again.
      if (turn === 1 && !row.forkedFromSession) {
        // Skills and attachments, then the Project's setup: a failure ends the session before any model request.
        const first = await this.project.firstTurn(row, handle, env, (prebuilt) => this.deps.prepareFirstTurn(row, handle, prebuilt))
        if ('error' in first) {
          dropStarted()
          this.deps.gatewaySessions.close(token)
          this.deps.gatewaySessions.settle(token)
          return void this.inbox.apply(id, { type: 'sandbox.failed', error: first.error })
        }
        prompt = firstTurnPrompt(row, first.attachments)
        placedFiles = first.attachments !== null
      } else prompt = this.deps.store.messageForTurn(id, turn)?.content
      if (prompt === undefined) throw new Error(`no prompt is stored for turn ${turn}`)
      run.prompt = prompt
      const variables = sandboxVariables(env, handle, this.deps.driver.isolatesNetwork)
      const spec = { ...(await turnSpec(this.deps, row, turn, prompt, handle, token)), env: variables }
      const output = turnOutput(this.deps.store, (text) => this.log(id, turn, text), id, turn, summary, new StoredPrefix(null))
      handed = true
      const said = (text: string) => this.log(id, turn, `${new Date(this.deps.now()).toISOString()} agentd: ${text}\n`, 'agentd')
      const launch = { driver: this.deps.driver, clis: this.startedClis, said, options: this.turnOptions, placedFiles }
      this.follow(id, run, summary, await launchTurn(launch, run, started, adapter, spec, output))
    } catch (err) {
      dropStarted()
      await this.finish(id, run, summary, Promise.reject(err))
    }
  }

  /**
   * After a restart: the turn an earlier server handed over at shutdown (handover.ts) goes on, its
   * sandbox thawed if the session is running (a paused one stays frozen until resumed). False when
   * there is none, or it cannot be taken over (then the turn is lost, as after a crash).
   */
  async takeOver(row: SessionRow): Promise<boolean> {
    const adapter = this.deps.adapters[row.harness as Harness]
    const found = adapter
      ? await reclaim(this.deps.driver, this.sandboxes.spec(row.id), row.turnsCount + 1, (line) => this.deps.log(line, { session: row.id }))
      : null
    if (!adapter || !found) return false
    const { handover, handle, proc } = found
    const { turn, token, meter } = handover
    let opening, spec
    try {
      // Its output from here on is masked as the earlier server's was.
      await this.project.of(row)
      opening = turnOpening(this.deps.catalog, row, turn, handle, await this.deps.turnTerms(row))
      spec = await turnSpec(this.deps, row, turn, handover.prompt, handle, token)
    } catch (err) {
      // Lost after all: its CLI is killed as it thaws, the turn ends as after a crash.
      proc.kill('SIGKILL')
      this.deps.log(`the turn handed over could not be taken over: ${(err as Error).message}`, { session: row.id })
      return false
    }
    const live = this.live.of(row.id)
    Object.assign(live, { handle, parked: true })
    this.deps.gatewaySessions.open(opening, { token, meter })
    const stored = this.deps.store.events.storedOfTurn(row.id, turn)
    live.logBytes = { ...loggedOf(stored, LOG_CAP_BYTES), setup: 0 }
    const run: TurnRun = { ...handover, handle, oomBefore: (await this.deps.driver.stats(handle).catch(() => null))?.oomKills ?? 0 }
    const summary = { last: null as string | null }
    this.follow(
      row.id,
      run,
      summary,
      followTurn(
        proc,
        adapter,
        spec,
        turnOutput(this.deps.store, (text) => this.log(row.id, turn, text), row.id, turn, summary, new StoredPrefix(stored)),
        this.turnOptions,
      ),
    )
    if (row.status === 'running') this.live.serial(row.id, 'wake', () => this.sandboxes.wake(row.id))
    return true
  }

  private get turnOptions() {
    return { transcriptMaxBytes: this.deps.transcriptMaxBytes }
  }

  /** Watches a started turn: its deadline (its CLI, then the publish after it), and its end, which comes back as `turn.ended`. */
  private follow(id: string, run: TurnRun, summary: TurnSummary, running: RunningTurn): void {
    const live = this.live.of(id)
    live.turn = { ...running, run, stopped: false, timedOut: false }
    // Shutdown began while the CLI was starting: it must not outlive the server.
    if (this.closing) running.process.kill('SIGKILL')
    const deadline = turnDeadline(Math.max(0, run.startedAt + this.deps.turnTimeoutMs - this.deps.now()), () => {
      if (live.turn?.process !== running.process) return
      live.turn.timedOut = true
      running.process.kill('SIGKILL')
    })
    const done = this.finish(id, run, summary, running.outcome, deadline.signal).finally(() => deadline.clear())
    if (live.turn?.process === running.process) live.turn.done = done
    this.live.track(done, `${id}: turn ${run.turn}`)
  }

  private async finish(id: string, run: TurnRun, summary: TurnSummary, running: Promise<TurnOutcome>, deadline?: AbortSignal) {
    const live = this.live.of(id)
    let outcome: TurnOutcome
    try {
      outcome = await running
    } catch (err) {
      outcome = failedOutcome(`the turn could not run: ${(err as Error).message}`)
    }
    const current = live.turn
    live.turn = undefined
    let closed: ReturnType<GatewaySessions['close']> | null = null // once its changes are published (git pushes with the key)
    const close = () => (closed ??= this.deps.gatewaySessions.close(run.token))
    try {
      // A turn killed by shutdown is left as it was; the next start ends it as "restarted". One
      // that ended by itself meanwhile is told as always (a handover of it is void).
      if (current?.abandoned) return
      if (current?.handedOver) dropHandover(this.sandboxes.spec(id).stateDir)
      const fresh = this.deps.store.get(id)
      if (!fresh) return
      const deps = { ...this.deps, sessionLog: (turn: number, text: string) => this.log(id, turn, text, 'agentd') }
      const flags = { stopped: current?.stopped === true, timedOut: current?.timedOut === true, ...(deadline ? { deadline } : {}) }
      const ended = await endedTurn(deps, { row: fresh, run, outcome, close, last: summary.last, ...flags })
      this.inbox.apply(id, ended.event, ended.patch)
    } finally {
      close()
      this.deps.gatewaySessions.settle(run.token)
      this.startedClis?.release(run.token)
    }
  }

  /** A line for the session's stored log (the CLI's stderr, or agentd's own: the gateway's requests), each within the log cap. */
  log(id: string, turn: number, raw: string, from: LogWriter = 'cli'): void {
    const bytes = this.live.of(id).logBytes
    if (bytes[from] >= LOG_CAP_BYTES) return
    // Masked here too, not only in the store: the same line goes to Loki.
    const text = this.deps.masks?.of(id)?.mask(raw) ?? raw
    bytes[from] += text.length
    const data = bytes[from] >= LOG_CAP_BYTES ? { truncated: true } : { text }
    this.deps.store.events.append(id, [{ turn, kind: 'log', type: from === 'cli' ? 'stderr' : 'agentd', data }])
    if ('text' in data) this.deps.onLog?.(id, text)
  }

  /**
   * After a restart: takes the session's sandbox over again. The driver kills what the previous
   * server's turn left running in it and keeps the disk (and, on gVisor, background processes).
   */
  adopt(id: string): Promise<void> {
    return this.sandboxes.adopt(id)
  }

  /** The region node this session's sandbox lived on when that node is lost to this one, else null. */
  lostNodeOf(id: string): string | null {
    return this.sandboxes.lostNodeOf(id)
  }

  /**
   * Stops the runtime: nothing new starts, every turn is stopped or handed over (`deadline`, ms since
   * the epoch, bounds the wait for their model requests), and this resolves once no effect is in
   * flight (the database can close). The next start takes handed-over turns over and treats the
   * others as after a crash.
   */
  async shutdown(deadline = Date.now() + 30_000): Promise<void> {
    this.closing = true
    await stopTurns({ ...this.deps, live: this.live, warm: this.warm, stateDirOf: (id) => this.sandboxes.spec(id).stateDir }, deadline)
  }
}
