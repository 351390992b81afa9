import { randomBytes } from 'node:crypto'
import type { SandboxDriver, SandboxHandle, SandboxProcess } from '../../sandbox/driver'
import { firstMessageLine, startedAhead } from '../harness/claude'
import type { SessionRow } from '../session-record/store'

/**
 * CLIs started ahead in warm sandboxes (issue 35): the CLI's own start is most of a trivial turn on
 * gVisor (0.9-1.6 s before its first model request, against 0.12-0.18 s for one started ahead and
 * fed its message: docs/decisions.md), so a warm sandbox also runs Claude Code, loaded and waiting
 * for its first message, which the gateway holds until a session takes the sandbox. Only a session
 * the started CLI fits uses it (its harness and model, nothing the CLI reads at its start: no
 * Project environment or checkout, tool servers, skills, effort, fast mode, output schema or pinned
 * version); for any other it is killed and the turn starts its CLI as always.
 */

export interface StartedCli {
  harness: 'harness_1'
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
    /** The model a started CLI runs (the harness's default): a session on another one starts its own. */
    readonly model: string,
  ) {}

  /** Starts Claude Code in `handle`, waiting at the gateway for a first message. */
  start(handle: SandboxHandle): StartedCli {
    const key = `gw_started_${randomBytes(24).toString('base64url')}`
    const command = startedAhead(handle, this.model, key)
    this.keys.add(key)
    const process = this.driver.exec(handle, command.argv, { env: command.env })
    const started: StartedCli = { harness: 'harness_1', model: this.model, key, process, ended: false }
    void process.exited.then(
      () => (started.ended = true),
      () => (started.ended = true),
    )
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

  /** The gateway's side: the first message once a session gives it; null for a key no CLI waits under. */
  firstMessage(key: string): Promise<string | null> | null {
    if (!this.keys.has(key) || this.waiting.has(key)) return null
    const given = this.given.get(key)
    if (given !== undefined) {
      this.forget(key)
      return Promise.resolve(given)
    }
    return new Promise((resolve) => this.waiting.set(key, resolve))
  }

  /** Gives the started CLI its first turn's prompt (now, or as soon as it asks). */
  deliver(started: StartedCli, prompt: string): void {
    const text = firstMessageLine(prompt)
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

  private forget(key: string): void {
    this.keys.delete(key)
    this.waiting.delete(key)
    this.given.delete(key)
  }
}
