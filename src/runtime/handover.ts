import { closeSync, constants, openSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { writePrivateFile } from '../../sandbox/private-file'
import type { SandboxDriver, SandboxHandle, SandboxProcess, SandboxSpec } from '../../sandbox/driver'
import type { LogFields } from '../domain/log'
import type { StoredTurn } from '../session-record/event-log'
import type { GatewaySessions, TurnMeter } from './gateway-bindings'
import type { TurnRun } from './turn-end'

/**
 * A graceful restart on a driver whose processes outlive agentd (gVisor): the stopping server
 * leaves a running turn frozen in its sandbox and writes this, and the next one takes the turn over
 * (reads its CLI's output again, skipping what is stored, and serves its gateway key again).
 */
export interface Handover {
  turn: number
  /** The CLI's process (SandboxProcess.ref). */
  ref: string
  /** The gateway key the CLI holds. */
  token: string
  /** What the turn used so far, as the gateway metered it. */
  meter: TurnMeter
  /** When the turn started: its timeout runs on from there. */
  startedAt: number
  /** The prompt the CLI was given (the parser reads it; turn 1's was made with its attachments). */
  prompt: string
}

const FILE = 'handover.json'

/** In the sandbox's host-only state folder, readable by agentd's user only: it holds the gateway key. */
function pathIn(stateDir: string): string {
  return join(stateDir, 'exec', FILE)
}

export function writeHandover(stateDir: string, handover: Handover): void {
  rmSync(pathIn(stateDir), { force: true })
  writePrivateFile(stateDir, FILE, JSON.stringify(handover))
}

export function dropHandover(stateDir: string): void {
  rmSync(pathIn(stateDir), { force: true })
}

/** The handover left in `stateDir`, removed as it is read (a turn is taken over once); null when none or unreadable. */
export function takeHandover(stateDir: string): Handover | null {
  let text: string
  try {
    const fd = openSync(pathIn(stateDir), constants.O_RDONLY | constants.O_NOFOLLOW)
    try {
      text = readFileSync(fd, 'utf8')
    } finally {
      closeSync(fd)
    }
  } catch {
    return null
  }
  dropHandover(stateDir)
  try {
    const h = JSON.parse(text) as Handover
    const numbers = [h.turn, h.startedAt, h.meter?.calls, h.meter?.input, h.meter?.output, h.meter?.costUsd]
    if (
      numbers.every((n) => typeof n === 'number') &&
      typeof h.ref === 'string' &&
      /^gw_[\w-]+$/.test(h.token) &&
      typeof h.prompt === 'string'
    )
      return h
  } catch {
    // written by an older agentd, or cut short: the turn is lost, as after a crash
  }
  return null
}

/**
 * The part of a turn's output an earlier server stored: the first `stored.harness` events, raw
 * lines and stderr characters read again are dropped, so each is stored once. The parser is fed
 * the same bytes from the start, so it yields the same events in the same order.
 */
export class StoredPrefix {
  private events: number
  private raw: number
  private stderrChars: number

  constructor(stored: StoredTurn | null) {
    this.events = stored?.harness ?? 0
    this.raw = stored?.raw ?? 0
    this.stderrChars = stored ? (stored.log.stderr.truncated ? Number.POSITIVE_INFINITY : stored.log.stderr.chars) : 0
  }

  newEvents<T>(list: T[]): T[] {
    const skip = Math.min(this.events, list.length)
    this.events -= skip
    return skip === 0 ? list : list.slice(skip)
  }

  newRaw<T>(list: T[]): T[] {
    const skip = Math.min(this.raw, list.length)
    this.raw -= skip
    return skip === 0 ? list : list.slice(skip)
  }

  newStderr(text: string): string {
    const skip = Math.min(this.stderrChars, text.length)
    this.stderrChars -= skip
    return skip === 0 ? text : text.slice(skip)
  }
}

/** What a handover needs of the runtime. */
export interface HandoverDeps {
  driver: SandboxDriver
  gatewaySessions: GatewaySessions
  /** Readies the session's turn for a freeze: its model requests end, new ones wait (Gateway.quiesce). */
  quiesce: (sessionId: string, deadline: number) => Promise<number | null>
  log: (line: string, fields?: LogFields) => void
}

/** A session's sandbox and turn as the runtime holds them. */
export interface HandedTurn {
  handle?: SandboxHandle
  parked: boolean
  turn?: { run: TurnRun; process: SandboxProcess; stopped: boolean; handedOver?: boolean }
}

/**
 * Leaves the session's turn frozen for the next server: its model requests are let finish first (a
 * reply cut by the freeze fails the turn of a CLI that does not retry one, Codex), then the sandbox
 * is frozen and a handover written to `stateDir`. A turn paused by its caller is frozen already. A
 * turn that cannot be frozen is left to be stopped as before.
 */
export async function handOver(deps: HandoverDeps, id: string, live: HandedTurn, stateDir: string, deadline: number): Promise<void> {
  const turn = live.turn
  if (!turn?.process.ref || !live.handle || turn.stopped) return
  let waited = 0
  if (!live.parked) {
    waited = (await deps.quiesce(id, deadline)) ?? -1
    if (waited < 0)
      deps.log('a model request of the turn was still open at the shutdown deadline; the turn is frozen with it', { session: id })
    if (live.turn !== turn) return // it ended meanwhile, and was told so
    try {
      await deps.driver.park(live.handle, { keepProcesses: true })
    } catch (err) {
      return deps.log(`the turn could not be frozen for the next server, so it ends: ${(err as Error).message}`, { session: id })
    }
  }
  const meter = deps.gatewaySessions.meterOf(turn.run.token)
  if (!meter || live.turn !== turn) return deps.log('the turn ended as it was frozen; its end is told as usual', { session: id })
  const { turn: number, token, startedAt, prompt } = turn.run
  try {
    writeHandover(stateDir, { turn: number, ref: turn.process.ref, token, meter, startedAt, prompt })
  } catch (err) {
    return deps.log(`the turn could not be handed over, so it ends: ${(err as Error).message}`, { session: id })
  }
  turn.handedOver = true
  const after = waited > 0 ? ` once its model request ended (${waited} ms)` : ''
  deps.log(`turn ${number} handed over to the next server${after}, its sandbox frozen`, { session: id, turn: number })
}

/**
 * After a restart: the turn the earlier server handed over in this sandbox (the file is used up),
 * its sandbox recovered with the CLI's process kept, and that process; null when there is none or
 * it is gone (the turn is then lost, as after a crash).
 */
export async function reclaim(
  driver: SandboxDriver,
  spec: SandboxSpec,
  turn: number,
  log: (line: string) => void,
): Promise<{ handover: Handover; handle: SandboxHandle; proc: SandboxProcess } | null> {
  const handover = driver.reattach ? takeHandover(spec.stateDir) : null
  if (!handover || handover.turn !== turn) return null
  const handle = await driver.recover(spec, { keep: [handover.ref] }).catch(() => null)
  const proc = handle && driver.reattach!(handle, handover.ref)
  if (handle && proc) return { handover, handle, proc }
  log(`the turn handed over at shutdown could not be taken over (its ${handle ? 'process' : 'sandbox'} is gone)`)
  return null
}

/** Log characters stored by each writer, as the runtime counts them against the log cap. */
export function loggedOf(stored: StoredTurn, cap: number): Record<'cli' | 'agentd', number> {
  const count = (w: { chars: number; truncated: boolean }) => (w.truncated ? cap : w.chars)
  return { cli: count(stored.log.stderr), agentd: count(stored.log.agentd) }
}
