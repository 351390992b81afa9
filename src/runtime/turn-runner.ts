import type { SessionEvent } from '../domain/session-event'
import { event } from '../harness/common'
import type { HarnessAdapter, TurnOutcome, TurnSpec } from '../harness/harness'
import { LineSplitter, MAX_LINE_BYTES, type Line } from './line-splitter'
import type { SandboxDriver, SandboxHandle, SandboxProcess } from '../../sandbox'
import { giveBack } from '../../sandbox/chunk-pool'
import { writeInTree } from '../../sandbox/host-fs'

export interface TurnCallbacks {
  /**
   * A batch of raw stdout lines and the normalized events they yielded, in stream order, with each
   * event's JSON (made once, for the cap and for storage).
   */
  onOutput(events: SessionEvent[], rawLines: string[], json: string[]): void
  /** A chunk of the CLI's stderr. */
  onStderr(text: string): void
  /** The CLI's stderr has ended (what is held back of it goes out). */
  onStderrEnd?(): void
}

export interface RunningTurn {
  readonly process: SandboxProcess
  readonly outcome: Promise<TurnOutcome>
}

export interface TurnOptions {
  /**
   * Raw stdout the turn may store, and as much again of normalized events (AGENTD_TRANSCRIPT_MAX_MB):
   * past either, lines are still parsed but no longer stored, and later events are counted, not
   * stored (capture `partial`).
   */
  transcriptMaxBytes?: number
}

/** Events of which the latest is kept past the events cap: the next turns' usage is summed from them (Codex reports thread totals). */
const ALWAYS_STORED = new Set(['usage'])

/** AGENTD_TRANSCRIPT_MAX_MB's default. */
const TRANSCRIPT_MAX_BYTES = 256 * 1024 * 1024
/** Bytes drained between two pauses that let HTTP and other turns run. */
const YIELD_EVERY_BYTES = 1024 * 1024
/**
 * Lines handled between two pauses: each is parsed and stored, so a flood of short lines costs
 * far more per byte than one long line (200 lines are a few ms of the API thread).
 */
const YIELD_EVERY_LINES = 200

/**
 * Lets timers and I/O run. A stream whose data is always ready resolves its reads as microtasks,
 * so without this a CLI printing as fast as it can would hold the event loop for as long as it
 * prints.
 */
const macrotask = () => new Promise<void>((resolve) => setTimeout(resolve, 0))

/** Reads a byte stream to its end, pausing for a macrotask every YIELD_EVERY_BYTES; `onChunk` sees each chunk. */
async function drain(stream: ReadableStream<Uint8Array>, onChunk: (chunk: Uint8Array) => void): Promise<void> {
  let sinceYield = 0
  for await (const chunk of stream) {
    onChunk(chunk)
    giveBack(chunk) // decoded: nothing holds it
    sinceYield += chunk.byteLength
    if (sinceYield >= YIELD_EVERY_BYTES) {
      sinceYield = 0
      await macrotask()
    }
  }
}

/**
 * Splits a byte stream into lines (each cut at MAX_LINE_BYTES) and hands them to `onLines` in
 * batches of at most YIELD_EVERY_LINES, the unterminated tail last; pauses for a macrotask every
 * YIELD_EVERY_BYTES bytes or YIELD_EVERY_LINES lines, whichever comes first.
 */
async function forEachLine(stream: ReadableStream<Uint8Array>, onLines: (lines: Line[]) => void): Promise<void> {
  const splitter = new LineSplitter()
  let bytes = 0
  let lines = 0
  for await (const chunk of stream) {
    bytes += chunk.byteLength
    const done = splitter.push(chunk)
    giveBack(chunk) // the splitter copied what it keeps; the lines are strings
    for (let i = 0; i < done.length; i += YIELD_EVERY_LINES) {
      const batch = done.slice(i, i + YIELD_EVERY_LINES)
      onLines(batch)
      lines += batch.length
      if (lines >= YIELD_EVERY_LINES) {
        lines = bytes = 0
        await macrotask()
      }
    }
    if (bytes >= YIELD_EVERY_BYTES) {
      lines = bytes = 0
      await macrotask()
    }
  }
  const tail = splitter.end()
  if (tail) onLines([tail])
}

/** Writes the CLI's config files into its home, then starts the CLI in the sandbox. */
export async function startTurn(
  driver: SandboxDriver,
  handle: SandboxHandle,
  adapter: HarnessAdapter,
  spec: TurnSpec,
  callbacks: TurnCallbacks,
  options: TurnOptions = {},
): Promise<RunningTurn> {
  const command = adapter.buildTurn(spec)
  // The home is the sandbox's: a link planted there by an earlier turn is replaced, never followed.
  for (const [path, content] of Object.entries(command.files ?? {})) writeInTree(handle.hostHome, path, content)
  return followTurn(driver.exec(handle, command.argv, { env: { ...spec.env, ...command.env } }), adapter, spec, callbacks, options)
}

/**
 * Reads a turn's CLI to its end: its stdout parsed into events and raw lines, its stderr, its
 * outcome. Also a turn an earlier server handed over, whose output is read again from its start.
 */
export function followTurn(
  proc: SandboxProcess,
  adapter: HarnessAdapter,
  spec: TurnSpec,
  callbacks: TurnCallbacks,
  options: TurnOptions = {},
): RunningTurn {
  const parser = adapter.createParser(spec)
  const maxStored = options.transcriptMaxBytes ?? TRANSCRIPT_MAX_BYTES
  let stored = 0
  // The raw transcript lost bytes: a line was cut, or the turn went over its transcript cap.
  let partial = false
  let full = false
  // The events stored so far (their JSON's length), and those past the cap, counted only.
  let eventBytes = 0
  let unstored = 0
  const events: SessionEvent[] = []
  const json: string[] = []
  // Past the cap, the latest usage event only, stored once at the end (a flood of them is no way round the cap).
  let lastUsage: SessionEvent | null = null
  const keep = (e: SessionEvent) => {
    const text = JSON.stringify(e)
    if (unstored > 0 || eventBytes + text.length > maxStored) {
      if (ALWAYS_STORED.has(e.type)) lastUsage = e
      else unstored++
      partial = true
      return
    }
    eventBytes += text.length
    events.push(e)
    json.push(text)
  }
  const stdout = forEachLine(proc.stdout, (lines) => {
    const raw: string[] = []
    events.length = json.length = 0
    for (const line of lines) {
      const blank = line.text.trim() === ''
      if (!blank) for (const e of parser.push(line.text)) keep(e)
      if (line.cut) {
        partial = true
        keep(
          event(adapter.id, 'error', {
            content: `agentd: a line of ${line.bytes} bytes of the CLI's output was cut to its first ${MAX_LINE_BYTES} bytes`,
          }),
        )
      }
      if (blank) continue
      // Kept bytes plus the newline (a cut line is stored cut). Past the cap nothing more is
      // stored, so the raw transcript stays a prefix of what the CLI printed.
      const size = Math.min(line.bytes, MAX_LINE_BYTES) + 1
      if (!full && stored + size <= maxStored) {
        stored += size
        raw.push(line.text)
      } else full = partial = true
    }
    if (events.length > 0 || raw.length > 0) callbacks.onOutput([...events], raw, [...json])
  })
  const stderr = (async () => {
    const decoder = new TextDecoder()
    await drain(proc.stderr, (chunk) => callbacks.onStderr(decoder.decode(chunk, { stream: true })))
  })()
  const outcome = (async () => {
    const exitCode = await proc.exited
    await Promise.allSettled([stdout, stderr])
    callbacks.onStderrEnd?.()
    const late: SessionEvent[] = []
    if (lastUsage) late.push(lastUsage)
    if (unstored > 0)
      late.push(
        event(adapter.id, 'error', {
          content: `agentd: ${unstored} events of this turn were not stored (past AGENTD_TRANSCRIPT_MAX_MB, ${maxStored} bytes of events)`,
        }),
      )
    if (late.length > 0)
      callbacks.onOutput(
        late,
        [],
        late.map((e) => JSON.stringify(e)),
      )
    const outcome = parser.finish(exitCode)
    return partial && outcome.capture === 'complete' ? { ...outcome, capture: 'partial' as const } : outcome
  })()
  return { process: proc, outcome }
}

/** The outcome of a turn that could not run, or whose CLI could not be read to its end. */
export function failedOutcome(error: string): TurnOutcome {
  return {
    resumeId: null,
    answerText: null,
    structured: null,
    error,
    usage: null,
    model: null,
    harnessVersion: null,
    toolCalls: 0,
    toolErrors: 0,
    capture: 'failed',
  }
}
