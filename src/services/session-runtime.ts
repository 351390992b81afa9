import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { SessionMachineEvent } from '../../machines/session.machine'
import type { SessionEvent } from '../domain/session-event'
import type { Harness } from '../domain/harness'
import type { HarnessAdapter, TokenUsage, TurnOutcome } from '../harness/harness'
import type { SandboxDriver, SandboxHandle } from '../../sandbox'
import type { Catalog } from './catalog'
import type { GatewaySessions } from './gateway-sessions'
import { compileOutputSchema } from './output-schema'
import type { SessionPatch, SessionRow, SessionStore } from './session-store'
import { startTurn, type RunningTurn } from './turn-runner'

export interface RuntimeDeps {
  store: SessionStore
  adapters: Partial<Record<Harness, HarnessAdapter>>
  catalog: Catalog
  driver: SandboxDriver
  gatewayUrl: string
  gatewaySessions: GatewaySessions
  dataDir: string
  now: () => number
  log: (line: string) => void
  apply: (id: string, event: SessionMachineEvent, patch?: SessionPatch) => boolean
  admit: (orgId: string) => void
}

interface Live {
  handle?: SandboxHandle
  turn?: RunningTurn
}

/** A machine action as `transition()` returns it. */
interface ActionObject {
  type: string
  params?: unknown
}

const projectRoot = join(import.meta.dir, '..', '..')

/**
 * Carries out the machine's actions after their transition is committed: sandboxes, turns, and
 * admission. Results come back to the machine as events (`sandbox.ready`, `turn.ended`).
 */
export class SessionRuntime {
  private readonly live = new Map<string, Live>()
  private readonly pending = new Set<Promise<unknown>>()
  private closing = false

  constructor(private readonly deps: RuntimeDeps) {}

  carryOut(id: string, actions: ActionObject[]): void {
    // While shutting down, nothing new starts; what runs is being stopped.
    if (this.closing) return
    for (const action of actions) {
      switch (action.type) {
        case 'provisionSandbox':
          this.track(this.provision(id))
          break
        case 'startTurn':
          this.track(this.runTurn(id))
          break
        case 'killTurn':
          this.live.get(id)?.turn?.process.kill('SIGKILL')
          break
        case 'releaseSandbox':
          if (!(action.params as { keep: boolean }).keep) this.track(this.destroy(id))
          break
        case 'destroySandbox':
          this.track(this.destroy(id))
          break
        case 'admitQueued': {
          const row = this.deps.store.get(id)
          if (row) queueMicrotask(() => this.closing || this.deps.admit(row.orgId))
          break
        }
        default:
          this.deps.log(`agentd: session ${id}: no effect for action ${action.type}`)
      }
    }
  }

  private track(work: Promise<unknown>): void {
    this.pending.add(work)
    void work.finally(() => this.pending.delete(work))
  }

  private sandboxDir(id: string): string {
    return join(this.deps.dataDir, 'sandboxes', id)
  }

  private async provision(id: string): Promise<void> {
    try {
      const dir = this.sandboxDir(id)
      const handle = await this.deps.driver.create({
        id,
        hostWorkspace: join(dir, 'workspace'),
        hostHome: join(dir, 'home'),
        readOnlyPaths: [join(projectRoot, 'node_modules')],
      })
      this.live.set(id, { ...this.live.get(id), handle })
      if (!this.deps.apply(id, { type: 'sandbox.ready' })) await this.destroy(id)
    } catch (err) {
      this.deps.apply(id, { type: 'sandbox.failed', error: `sandbox could not start: ${(err as Error).message}` })
    }
  }

  private async runTurn(id: string): Promise<void> {
    const row = this.deps.store.get(id)
    const live = this.live.get(id)
    if (!row || !live?.handle) return
    const handle = live.handle
    const turn = row.turnsCount + 1
    const adapter = this.deps.adapters[row.harness as Harness]
    const token = this.deps.gatewaySessions.open({ sessionId: id, workspace: handle.workspace })
    const summary = { last: null as string | null }
    let outcome: TurnOutcome
    try {
      if (!adapter) throw new Error(`${row.harness} has no runner on this server`)
      const running = await startTurn(
        this.deps.driver,
        handle,
        adapter,
        {
          prompt: row.prompt,
          workspace: handle.workspace,
          home: handle.home,
          gatewayUrl: this.deps.gatewayUrl,
          gatewayToken: token,
          model: row.model,
          ...(row.effort ? { effort: row.effort } : {}),
          ...(row.speed ? { speed: row.speed } : {}),
          ...(row.outputSchema ? { outputSchema: row.outputSchema } : {}),
          ...(row.harnessSessionId ? { resumeId: row.harnessSessionId } : {}),
        },
        {
          onOutput: (events, rawLines) => {
            for (const event of events) {
              if (event.type === 'message' && event.role === 'assistant' && event.content?.trim()) summary.last = event.content
            }
            this.deps.store.appendOutput(id, turn, events.map((e) => harnessEvent(turn, e)), rawLines)
          },
          onStderr: (text) => this.deps.store.appendOutput(id, turn, [{ turn, kind: 'log', type: 'stderr', data: { text } }], []),
        },
      )
      live.turn = running
      writeFileSync(join(this.sandboxDir(id), 'turn.pid'), String(running.process.pid))
      outcome = await running.outcome
    } catch (err) {
      outcome = failedOutcome(`the turn could not run: ${(err as Error).message}`)
    } finally {
      live.turn = undefined
      rmSync(join(this.sandboxDir(id), 'turn.pid'), { force: true })
    }
    const metered = this.deps.gatewaySessions.close(token)
    // A turn killed by shutdown is left as it was; the next start ends it as "restarted".
    if (this.closing) return
    const patch = this.turnPatch(row, turn, outcome, metered ?? outcome.usage, summary.last)
    this.deps.apply(id, { type: 'turn.ended', error: outcome.error, schemaValid: patch.schemaValid ?? null }, patch)
  }

  /** The session fields a finished turn sets: answer, tokens, cost, counts, capture. */
  private turnPatch(row: SessionRow, turn: number, outcome: TurnOutcome, usage: TokenUsage | null, lastText: string | null): SessionPatch {
    let schemaValid: boolean | null = null
    if (row.outputSchema) {
      schemaValid = outcome.structured !== null && compileOutputSchema(row.outputSchema)(outcome.structured) === true
    }
    const add = (a: number | null, b: number | undefined) => (b === undefined ? a : (a ?? 0) + b)
    const input = add(row.inputTokens, usage?.input)
    const output = add(row.outputTokens, usage?.output)
    const cacheRead = add(row.cacheReadTokens, usage?.cacheRead)
    const cacheWrite = add(row.cacheWriteTokens, usage?.cacheWrite)
    const model = this.deps.catalog.models.find((m) => m.id === row.model)
    const turnCost = usage && model ? ((usage.input + usage.cacheWrite) * model.pricing.input_per_million + usage.output * model.pricing.output_per_million) / 1e6 : null
    const answered = outcome.error === null || outcome.answerText !== null
    return {
      turnsCount: turn,
      inputTokens: input,
      outputTokens: output,
      cacheReadTokens: cacheRead,
      cacheWriteTokens: cacheWrite,
      reasoningTokens: add(row.reasoningTokens, usage?.reasoning),
      totalTokens: usage ? (input ?? 0) + (cacheWrite ?? 0) + (output ?? 0) : row.totalTokens,
      totalCostUsd: turnCost === null ? row.totalCostUsd : (row.totalCostUsd ?? 0) + turnCost,
      toolCallsCount: (row.toolCallsCount ?? 0) + outcome.toolCalls,
      toolErrorsCount: (row.toolErrorsCount ?? 0) + outcome.toolErrors,
      sessionCapture: outcome.capture,
      harnessSessionId: outcome.resumeId ?? row.harnessSessionId,
      harnessVersionResolved: outcome.harnessVersion ?? row.harnessVersionResolved,
      effectiveConfig: { ...(row.effectiveConfig ?? {}), harness_version: outcome.harnessVersion ?? row.harnessVersionResolved },
      summary: lastText ? lastLine(lastText) : row.summary,
      hasResult: answered,
      resultText: answered ? outcome.answerText : null,
      resultStructured: answered ? outcome.structured : null,
      schemaValid,
      completedAt: this.deps.now(),
    }
  }

  private async destroy(id: string): Promise<void> {
    const live = this.live.get(id)
    this.live.delete(id)
    live?.turn?.process.kill('SIGKILL')
    if (live?.handle) await this.deps.driver.destroy(live.handle).catch((err) => this.deps.log(`agentd: session ${id}: destroy failed: ${err}`))
    // A destroyed sandbox takes its disk with it: workspace, CLI state home, pid file.
    rmSync(this.sandboxDir(id), { recursive: true, force: true })
    this.deps.store.forget(id)
  }

  /** After a crash: kills the process group of a turn that outlived the previous server process. */
  reapOrphans(id: string): void {
    const pidFile = join(this.sandboxDir(id), 'turn.pid')
    if (!existsSync(pidFile)) return
    const pid = Number(readFileSync(pidFile, 'utf8'))
    try {
      if (pid > 0) process.kill(-pid, 'SIGKILL')
    } catch {
      // already gone
    }
    rmSync(pidFile, { force: true })
  }

  /**
   * Stops every turn and waits until no effect is in flight, so the database can be closed.
   * The sessions stay as they are; the next start treats them like after a crash.
   */
  async shutdown(): Promise<void> {
    this.closing = true
    for (const live of this.live.values()) live.turn?.process.kill('SIGKILL')
    while (this.pending.size > 0) await Promise.allSettled([...this.pending])
  }
}

function harnessEvent(turn: number, event: SessionEvent) {
  return { turn, kind: 'harness' as const, type: event.type, data: event as Record<string, unknown> }
}

function lastLine(text: string): string {
  const lines = text.split('\n').map((l) => l.trim()).filter(Boolean)
  return (lines.at(-1) ?? '').slice(0, 200)
}

function failedOutcome(error: string): TurnOutcome {
  return { resumeId: null, answerText: null, structured: null, error, usage: null, model: null, harnessVersion: null, toolCalls: 0, toolErrors: 0, capture: 'failed' }
}
