import type { SessionMachineEvent } from '../../machines/session.machine'
import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import type { Catalog } from '../catalog/catalog'
import type { LogFields } from '../domain/log'
import type { TurnOutcome } from '../harness/harness'
import type { SessionPatch, SessionRow } from '../session-record/store'
import type { ArtifactStore } from './artifacts'
import type { TurnMeter, TurnOpening, TurnTerms } from './gateway-bindings'
import type { RunningTurn } from './turn-runner'
import type { Harness } from '../domain/harness'
import { turnPatch } from './turn-patch'

/** One turn of a session as the runtime runs it (and, on gVisor, hands it over at shutdown). */
export interface TurnRun {
  turn: number
  /** Its gateway key. */
  token: string
  handle: SandboxHandle
  /** The sandbox's out-of-memory kills before the turn: more at its end mean one of its processes was. */
  oomBefore: number
  /** When it started, ms since the epoch: its timeout runs from there. */
  startedAt: number
  prompt: string
}

/** A turn whose CLI runs, as the runtime holds it. */
export type LiveTurn = RunningTurn & {
  run: TurnRun
  stopped: boolean
  timedOut: boolean
  done?: Promise<unknown>
  /** Killed by shutdown: its end is not told (the next start does, as "restarted"). */
  abandoned?: boolean
  /** Left frozen for the next server (handover.ts). */
  handedOver?: boolean
}

const STOP_GRACE_MS = 3000

/** Interrupts a running turn: SIGINT first, as a user at the terminal would, then SIGKILL. */
export function interrupt(turn: LiveTurn | undefined): void {
  if (!turn) return
  turn.stopped = true
  turn.process.kill('SIGINT')
  const kill = setTimeout(() => turn.process.kill('SIGKILL'), STOP_GRACE_MS)
  void turn.process.exited.finally(() => clearTimeout(kill))
}

/**
 * A turn's deadline: `ms` from now `signal` aborts and `onTimeout` runs, unless cleared first. It
 * runs to the turn's end, past its CLI: what agentd does after it (the publish) stops at it too.
 */
export function turnDeadline(ms: number, onTimeout: () => void): { signal: AbortSignal; clear(): void } {
  const controller = new AbortController()
  const timer = setTimeout(() => {
    controller.abort()
    onTimeout()
  }, ms)
  return { signal: controller.signal, clear: () => clearTimeout(timer) }
}

/** What the gateway is told of a turn it opens a key for: the harness's catalog models, the session's terms. */
export function turnOpening(catalog: Catalog, row: SessionRow, turn: number, handle: SandboxHandle, terms: TurnTerms): TurnOpening {
  const models = catalog.models.filter((m) => m.harnesses.includes(row.harness as Harness))
  return { sessionId: row.id, orgId: row.orgId, turn, workspace: handle.workspace, models, ...terms }
}

export interface TurnEndDeps {
  /**
   * After a turn that ended well: its changes to the session's repository pushed (with the turn's
   * gateway key) and a pull request opened (or found; `pull` null when nothing new was pushed),
   * with the number of files its branch changes (null: unknown, left as it was); null when the
   * session has no repository. It must
   * stop when `turn.signal` (the turn's deadline) aborts.
   */
  publish?: (
    row: SessionRow,
    handle: SandboxHandle,
    turn: { token: string; signal?: AbortSignal },
  ) => Promise<{ files: number | null; pull: { branch: string; prUrl: string } | null } | null>
  driver: SandboxDriver
  artifacts: ArtifactStore
  catalog: Catalog
  turnTimeoutMs: number
  limits: { memoryBytes: number }
  now: () => number
  log: (line: string, fields?: LogFields) => void
  /** A line for the session's own stored log (what the turn's end left out, say). */
  sessionLog?: (turn: number, text: string) => void
}

export interface TurnEnd {
  row: SessionRow
  run: TurnRun
  outcome: TurnOutcome
  /** Closes the turn's gateway key: what it metered, and the plan limit the turn crossed. */
  close: () => { usage: TurnMeter | null; limit: string | null }
  /** The last thing the assistant said (the run's summary). */
  last: string | null
  stopped: boolean
  timedOut: boolean
  /**
   * Aborts at the turn's deadline, which covers what agentd does after the CLI exited too: a
   * publish still running then is killed, and the turn fails as timed out.
   */
  deadline?: AbortSignal
}

/** The `turn.ended` event of a turn whose CLI exited, and its patch: what went wrong, its artifacts, its usage. */
export async function endedTurn(deps: TurnEndDeps, end: TurnEnd): Promise<{ event: SessionMachineEvent; patch: SessionPatch }> {
  const { row, run, stopped } = end
  let outcome = end.outcome
  // Published first: git in the sandbox pushes with the turn's key, which closing ends.
  let published: Awaited<ReturnType<NonNullable<TurnEndDeps['publish']>>> = null
  if (!stopped && !outcome.error && deps.publish) {
    try {
      published = await deps.publish(row, run.handle, { token: run.token, ...(end.deadline ? { signal: end.deadline } : {}) })
    } catch (err) {
      deps.log(`changes not published: ${(err as Error).message}`, { session: row.id, turn: run.turn })
    }
  }
  // Past the deadline by now (the CLI, or the publish after it): the turn timed out.
  const timedOut = end.timedOut || (!stopped && end.deadline?.aborted === true)
  const { usage: metered, limit } = end.close()
  // The gateway refused this turn's calls past a plan limit: the turn fails naming it.
  if (limit !== null && !stopped) outcome = { ...outcome, error: limit }
  if (timedOut) outcome = { ...outcome, error: `the turn ran longer than ${Math.round(deps.turnTimeoutMs / 1000)} s and was stopped` }
  else if (!stopped && (await outOfMemory(deps.driver, run.handle, run.oomBefore))) {
    // A process of the turn went over the sandbox's memory limit: the turn fails, saying so,
    // even when the agent carried on after its tool call was killed.
    outcome = {
      ...outcome,
      error:
        `the sandbox ran out of memory (limit ${Math.round(deps.limits.memoryBytes / 1024 / 1024)} MB): ` +
        'a process of this turn was killed',
    }
  }
  let artifactCount = row.artifactCount
  try {
    const collected = deps.artifacts.collect(row.id, run.handle.hostWorkspace, run.turn)
    artifactCount = collected.count
    if (collected.skipped.length > 0) {
      const bytes = collected.skipped.reduce((sum, f) => sum + f.size, 0)
      const names = collected.skipped
        .slice(0, 5)
        .map((f) => f.name)
        .join(', ')
      deps.sessionLog?.(
        run.turn,
        `${new Date(deps.now()).toISOString()} agentd: ${collected.skipped.length} artifacts (${bytes} bytes) ` +
          `not kept past AGENTD_ARTIFACTS_MAX_MB: ${names}${collected.skipped.length > 5 ? ', …' : ''}\n`,
      )
    }
  } catch (err) {
    deps.log(`artifacts not collected: ${(err as Error).message}`, { session: row.id, turn: run.turn })
  }
  // Tokens as the gateway metered them; reasoning only the CLI reports.
  const usage = metered ? { ...metered, reasoning: outcome.usage?.reasoning ?? 0 } : outcome.usage
  const patch = turnPatch(deps.catalog, row, run.turn, outcome, usage, end.last, stopped, deps.now())
  return {
    event: { type: 'turn.ended', error: stopped ? null : outcome.error, schemaValid: patch.schemaValid ?? null, stopped },
    patch: {
      ...patch,
      artifactCount,
      ...(published && published.files !== null ? { filesProduced: published.files } : {}),
      ...(published?.pull ? { branch: published.pull.branch, prUrl: published.pull.prUrl } : {}),
    },
  }
}

async function outOfMemory(driver: SandboxDriver, handle: SandboxHandle, before: number): Promise<boolean> {
  try {
    return (await driver.stats(handle)).oomKills > before
  } catch {
    return false
  }
}
