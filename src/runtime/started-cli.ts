import { randomBytes } from 'node:crypto'
import type { SandboxDriver, SandboxHandle, SandboxProcess } from '../../sandbox/driver'
import { writeInTree } from '../../sandbox/host-fs'
import type { Harness } from '../domain/harness'
import type { HarnessAdapter, StartAhead, TurnSpec } from '../harness/harness'
import type { SessionRow } from '../session-record/store'
import type { TurnRun } from './turn-end'
import { followTurn, startTurn, type RunningTurn, type TurnCallbacks, type TurnOptions } from './turn-runner'

/**
 * CLIs started ahead in warm sandboxes (issue 35): the CLI's own start is most of a trivial turn on
 * gVisor (Claude Code 0.9-1.6 s before its first model request, against 0.12-0.18 s started ahead
 * and fed its message; Gemini CLI 1.93 s against 0.43 s: docs/decisions.md), so a warm sandbox also
 * runs the CLI of the harness last asked for (where it can be started ahead: `StartAhead`), loaded
 * and waiting for its first message, which the gateway holds until a session takes the sandbox.
 * Only a session the started CLI fits uses it (its harness and model, nothing the CLI reads at its
 * start: no Project environment or checkout, attachments, tool servers, skills, effort, fast mode,
 * output schema or pinned version); for any other it is killed and the turn starts its CLI as always.
 */

/** How long the gateway holds a started CLI's ask before it answers 204 and the CLI asks again (AGENTD_TIME_SCALE scales it). */
export const ASK_AGAIN_MS = 60_000

export interface StartedCli {
  harness: Harness
  model: string
  /** The gateway key it was started with: its session's first turn is opened under it. */
  key: string
  process: SandboxProcess
  /** Its process has ended (it never got a message, or failed to start). */
  ended: boolean
}

/** What of a session decides whether a started CLI can run its first turn. */
export type FitFacts = Pick<
  SessionRow,
  'harness' | 'model' | 'projectId' | 'repoOwner' | 'effort' | 'speed' | 'outputSchema' | 'harnessVersionRequested' | 'effectiveConfig'
>

export class StartedClis {
  /** Keys of started CLIs not taken or dropped yet. */
  private readonly keys = new Set<string>()
  /** CLIs asking for their first message: its resolver, by key. */
  private readonly waiting = new Map<string, (text: string | null) => void>()
  /** Messages given before their CLI asked. */
  private readonly given = new Map<string, string>()

  constructor(
    private readonly driver: SandboxDriver,
    private readonly adapters: Partial<Record<Harness, HarnessAdapter>>,
    /**
     * The harnesses whose CLI is started ahead, each with the model it runs (the harness's
     * default): a session on another model starts its own.
     */
    readonly models: Partial<Record<Harness, string>>,
    private readonly log: (line: string) => void,
    private readonly askAgainMs = ASK_AGAIN_MS,
  ) {}

  /** Starts the CLI of `harness` in `handle`, waiting at the gateway for a first message; null when none is started for it. */
  start(handle: SandboxHandle, harness: Harness): StartedCli | null {
    const model = this.models[harness]
    const ahead = this.startAheadOf(harness)
    if (!model || !ahead) return null
    const key = `gw_started_${randomBytes(24).toString('base64url')}`
    const command = ahead.command(handle, model, key)
    for (const [path, content] of Object.entries(command.files ?? {})) writeInTree(handle.hostHome, path, content)
    this.keys.add(key)
    const process = this.driver.exec(handle, command.argv, { env: command.env })
    const started: StartedCli = { harness, model, key, process, ended: false }
    const ended = (code: number | string) => {
      started.ended = true
      // Before a session took it: said once, as nothing else would (no curl in the sandbox, say).
      if (this.keys.has(key)) {
        this.forget(key)
        this.log(`agentd: a CLI started ahead in warm sandbox ${handle.id} ended (${code}) before a session took it`)
      }
    }
    void process.exited.then(ended, (err: Error) => ended(err.message))
    return started
  }

  /** Whether `started` can run this session's first turn (see the module's comment). */
  fits(started: StartedCli, row: FitFacts, toolServers: number): boolean {
    const skills = (row.effectiveConfig as { skills?: unknown[] } | null)?.skills ?? []
    return (
      !started.ended &&
      row.harness === started.harness &&
      row.model === started.model &&
      row.projectId === null &&
      row.repoOwner === null &&
      row.effort === null &&
      row.speed !== 'fast' &&
      row.outputSchema === null &&
      row.harnessVersionRequested === null &&
      toolServers === 0 &&
      skills.length === 0
    )
  }

  /** The session's started CLI (taken from `live`) when it fits the session; one that does not is ended. */
  take(live: { started?: StartedCli }, row: FitFacts, toolServers: number): StartedCli | null {
    const started = live.started
    live.started = undefined
    if (!started) return null
    if (this.fits(started, row, toolServers)) return started
    this.drop(started)
    return null
  }

  /**
   * The gateway's side: the first message once a session gives it; '' after `askAgainMs` without
   * one (the CLI asks again: a relay ends a connection silent for minutes); null for a key no CLI
   * waits under. A request that goes away stops waiting.
   */
  firstMessage(key: string, signal?: AbortSignal): Promise<string | null> | null {
    if (!this.keys.has(key) || this.waiting.has(key)) return null
    const given = this.given.get(key)
    if (given !== undefined) {
      this.forget(key)
      return Promise.resolve(given)
    }
    return new Promise((resolve) => {
      const stop = () => {
        clearTimeout(timer)
        if (this.waiting.get(key) === settle) this.waiting.delete(key)
      }
      const settle = (text: string | null) => {
        stop()
        resolve(text)
      }
      const timer = setTimeout(() => settle(''), this.askAgainMs)
      timer.unref?.()
      signal?.addEventListener('abort', () => settle(null), { once: true })
      this.waiting.set(key, settle)
    })
  }

  /** The turn of a started CLI ended: whatever is kept under its key goes. */
  release(key: string): void {
    this.forget(key)
  }

  /** Gives the started CLI its first turn's prompt (now, or as soon as it asks). */
  deliver(started: StartedCli, prompt: string): void {
    const text = this.startAheadOf(started.harness)!.firstMessage(prompt)
    const waiter = this.waiting.get(started.key)
    if (waiter) {
      this.forget(started.key)
      waiter(text)
    } else if (this.keys.has(started.key)) this.given.set(started.key, text)
  }

  /** A started CLI no session will use: its wait ends empty and it is killed. */
  drop(started: StartedCli): void {
    const waiter = this.waiting.get(started.key)
    this.forget(started.key)
    waiter?.(null)
    started.process.kill('SIGKILL')
  }

  /** Whether `started` takes `prompt` as a CLI started with its turn would (see StartAhead.accepts). */
  accepts(started: StartedCli, prompt: string): boolean {
    return this.startAheadOf(started.harness)?.accepts?.(prompt) ?? true
  }

  private startAheadOf(harness: Harness): StartAhead | undefined {
    return this.adapters[harness]?.startAhead
  }

  private forget(key: string): void {
    this.keys.delete(key)
    this.waiting.delete(key)
    this.given.delete(key)
  }
}

/** What starting a turn's CLI uses: the driver, the started CLIs, the session's log, the turn's options. */
export interface Launch {
  driver: SandboxDriver
  clis: StartedClis | null
  /** A line of agentd's in the session's log. */
  said: (text: string) => void
  options: TurnOptions
  /**
   * Files were placed in the workspace for this turn (attachments) after a started CLI loaded: it
   * is not used, as a CLI may read them as it starts (Gemini CLI looks for GEMINI.md below its folder).
   */
  placedFiles: boolean
}

/**
 * The turn's CLI: the one started ahead in its sandbox, handed its message, when it still waits
 * (its wait may have been cut short); else one started now (and a started one not used, ended).
 */
export async function launchTurn(
  launch: Launch,
  run: TurnRun,
  started: StartedCli | null,
  adapter: HarnessAdapter,
  spec: TurnSpec,
  output: TurnCallbacks,
): Promise<RunningTurn> {
  if (!started || started.ended || !launch.clis || launch.placedFiles || !launch.clis.accepts(started, run.prompt)) {
    if (started) launch.clis?.drop(started)
    return startTurn(launch.driver, run.handle, adapter, spec, output, launch.options)
  }
  launch.said('the turn runs on the CLI started ahead in its sandbox')
  const running = followTurn(started.process, adapter, spec, output, launch.options)
  launch.clis.deliver(started, run.prompt)
  return running
}

/** What the warm pool is given to start CLIs ahead (nothing without started CLIs), starting none while `busy`. */
export function warmCliDeps(
  clis: StartedClis | null,
  busy: () => boolean,
): {
  startCli?: (handle: SandboxHandle, harness: Harness) => StartedCli | null
  dropCli?: (started: StartedCli) => void
  busy?: () => boolean
  firstCli?: Harness
} {
  const first = clis ? (Object.keys(clis.models)[0] as Harness | undefined) : undefined
  if (!clis || !first) return {}
  return { startCli: (handle, harness) => clis.start(handle, harness), dropCli: (started) => clis.drop(started), busy, firstCli: first }
}

/** The CLIs of AGENTD_WARM_CLI, each with its harness's default model; null when none is started. */
export function startedCliOf(
  warmCli: readonly Harness[],
  catalog: { harnesses: { id: string; default_model: string }[] },
  askAgainMs: number,
): { models: Partial<Record<Harness, string>>; askAgainMs: number } | null {
  const models: Partial<Record<Harness, string>> = {}
  for (const harness of warmCli) {
    const model = catalog.harnesses.find((h) => h.id === harness)?.default_model
    if (model) models[harness] = model
  }
  return Object.keys(models).length > 0 ? { models, askAgainMs } : null
}
