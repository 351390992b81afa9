/** Helpers every harness adapter shares: where the bundled CLIs live and how events are built. */
import { existsSync, readFileSync } from 'node:fs'
import { join, posix, resolve } from 'node:path'
import { EFFORTS, type Harness } from '../domain/harness'
import type { SessionEvent } from '../domain/session-event'
import type { HarnessEvent, StreamParser, TokenUsage, TurnOutcome } from './harness'
import { isObject } from '../domain/values'
import { FIRST_MESSAGE_PATH } from '../gateway/gateway'

export type Json = Record<string, unknown>

/**
 * The level a CLI accepts that is nearest to the catalog's `effort` (ties go to the higher level);
 * null for `auto` or none given, so the CLI keeps its own default.
 */
export function nearestEffort(effort: string | undefined, accepted: readonly string[]): string | null {
  const order = EFFORTS.filter((level) => level !== 'auto') as readonly string[]
  const want = effort ? order.indexOf(effort) : -1
  if (want < 0) return null
  let best: string | null = null
  let bestDistance = Infinity
  for (const level of accepted) {
    const distance = Math.abs(order.indexOf(level) - want)
    if (distance <= bestDistance) [best, bestDistance] = [level, distance]
  }
  return best
}

/** agentd's own node_modules: the CLI versions pinned in package.json. */
export const BUNDLED_MODULES = resolve(import.meta.dir, '../../node_modules')

export const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

/**
 * Where a turn's prompt is written, relative to the CLI's home (through `TurnCommand.files`), for
 * the CLI to read on stdin. Never in argv: on bwrap the CLI is a host process, and any host user
 * can read any process's /proc/<pid>/cmdline.
 */
export const PROMPT_FILE = '.agentd/prompt'

/**
 * `argv` with the prompt file on its stdin: a shell in the sandbox opens the file, removes it (the
 * prompt is the CLI's alone from then on) and execs the CLI, whose argv is then free of it.
 */
export function withPromptOnStdin(home: string, argv: string[]): string[] {
  return [
    '/bin/sh',
    '-c',
    'exec <"$1" || exit 126; rm -f -- "$1"; shift; exec "$@"',
    'agentd-prompt',
    posix.join(home, PROMPT_FILE),
    ...argv,
  ]
}

/**
 * `cli` started ahead (see StartAhead): its stdin is what curl gets from the gateway's
 * AGENTD_FIRST_MESSAGE_URL with the key in AGENTD_STARTED_KEY, given on curl's stdin (printf is
 * bash's own), never in an argv. 204 means ask again (the gateway answers so every minute: an
 * idle relay ends a silent connection); a 200 read whole is the message. Anything else (a 404, a
 * cut connection, a curl that failed) kills the CLI ($$: bash exec'd it), so it never answers a
 * message it did not get whole. `prime` goes to the CLI's stdin at once, before the message (a CLI
 * that gives up on a silent stdin needs it). The CLI is the process itself, so a stop or kill
 * reaches it as any turn's.
 */
export function startedAheadArgv(cli: string[], prime = ''): string[] {
  const ask =
    `f=$(mktemp) && while c=$(printf 'authorization: Bearer %s\\n' "$AGENTD_STARTED_KEY" | ` +
    `curl -sS -o "$f" -w '%{http_code}' -H @- "$AGENTD_FIRST_MESSAGE_URL"); e=$?; [ $e = 0 ] && [ "$c" = 204 ]; do :; done; ` +
    `if [ $e = 0 ] && [ "$c" = 200 ]; then cat "$f"; rm -f "$f"; else rm -f "$f"; kill -KILL $$; fi`
  const feed = prime ? `printf '%s' ${shellQuote(prime)}; ${ask}` : ask
  return ['/bin/bash', '-c', `exec "$@" < <(${feed})`, 'agentd-started', ...cli]
}

/** The variables curl of startedAheadArgv reads. */
export function startedAheadEnv(gatewayUrl: string, key: string): Record<string, string> {
  return { AGENTD_STARTED_KEY: key, AGENTD_FIRST_MESSAGE_URL: `${gatewayUrl}${FIRST_MESSAGE_PATH}` }
}

/** `text` as one single-quoted shell word. */
function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`
}

/** The version in a package's manifest under `modules`, or null when it is not installed there. */
export function packageVersion(modules: string, pkg: string): string | null {
  const manifest = join(modules, pkg, 'package.json')
  if (!existsSync(manifest)) return null
  const version = (JSON.parse(readFileSync(manifest, 'utf8')) as { version?: unknown }).version
  return typeof version === 'string' ? version : null
}

/** One stdout line as a JSON object with a string `type`, or null for anything else. */
/**
 * The part of a stream parser every CLI shares: stdout is JSON lines with a string `type` (other
 * lines are passed over), and the outcome counts tool calls and says how much of the turn was seen.
 */
export abstract class JsonLineParser implements StreamParser {
  private sawAnyEvent = false
  protected toolCalls = 0
  protected toolErrors = 0

  push(line: string): HarnessEvent[] {
    const raw = parseLine(line)
    if (!raw) return []
    this.sawAnyEvent = true
    return this.onEvent(raw)
  }

  abstract finish(exitCode: number | null): TurnOutcome

  /** One event of the stream. */
  protected abstract onEvent(raw: Json): HarnessEvent[]

  /** `ended`: the CLI reported the turn's end; without it the capture is partial, or failed when nothing came. */
  protected tally(ended: boolean): Pick<TurnOutcome, 'toolCalls' | 'toolErrors' | 'capture'> {
    return { toolCalls: this.toolCalls, toolErrors: this.toolErrors, capture: ended ? 'complete' : this.sawAnyEvent ? 'partial' : 'failed' }
  }
}

export function parseLine(line: string): Json | null {
  const trimmed = line.trim()
  if (!trimmed.startsWith('{')) return null
  try {
    const value: unknown = JSON.parse(trimmed)
    return isObject(value) && typeof value.type === 'string' ? value : null
  } catch {
    return null
  }
}

/** A normalized event; fields the line did not carry are left out rather than set to undefined. */
export function event(
  agent: Harness,
  type: SessionEvent['type'],
  fields: Omit<Partial<HarnessEvent>, 'type' | 'agent' | 'timestamp'>,
  timestamp?: string,
): HarnessEvent {
  const built: HarnessEvent = { type, agent, timestamp: timestamp ?? new Date().toISOString() }
  for (const [key, value] of Object.entries(fields)) if (value !== undefined) Object.assign(built, { [key]: value })
  return built
}

/** The `usage` event of a turn. */
export function usageEvent(agent: Harness, usage: TokenUsage, model: string | null, timestamp?: string): HarnessEvent {
  return event(
    agent,
    'usage',
    {
      model: model ?? undefined,
      inputTokens: usage.input,
      outputTokens: usage.output,
      cacheReadTokens: usage.cacheRead,
      cacheCreationTokens: usage.cacheWrite,
    },
    timestamp,
  )
}

export function str(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined
}

export function num(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0
}

/** The JSON object a text holds, or null (for answers that should be structured output). */
export function jsonObject(text: string | null): Json | null {
  if (text === null) return null
  try {
    const value: unknown = JSON.parse(text)
    return isObject(value) ? value : null
  } catch {
    return null
  }
}
