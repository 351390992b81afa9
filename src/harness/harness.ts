import type { Harness } from '../domain/harness'
import type { SessionEvent } from '../domain/session-event'

/** Everything a harness needs to run one turn of a session. */
export interface TurnSpec {
  prompt: string
  /** Working directory of the agent (the session's workspace as the sandbox sees it). */
  workspace: string
  /** The CLI's state home (HOME / CODEX_HOME parent) as the sandbox sees it; kept across turns. */
  home: string
  /** Base URL of agentd's model gateway as the sandbox sees it, e.g. http://127.0.0.1:43123 */
  gatewayUrl: string
  /** Per-session secret the CLI sends as its provider API key; the gateway maps it to the session. */
  gatewayToken: string
  model: string
  effort?: string
  speed?: string
  outputSchema?: Record<string, unknown>
  /** The CLI's own conversation id from an earlier turn, to resume it. */
  resumeId?: string
}

export interface TurnCommand {
  argv: string[]
  env: Record<string, string>
  /** Files to write (path relative to `home`) before the CLI starts, e.g. settings. */
  files?: Record<string, string>
}

export interface TokenUsage {
  input: number
  output: number
  cacheRead: number
  cacheWrite: number
  reasoning: number
}

/** What the parser concludes about a finished turn. */
export interface TurnOutcome {
  /** The CLI's own session/thread id, used to resume the next turn. */
  resumeId: string | null
  answerText: string | null
  structured: Record<string, unknown> | null
  /** Set when the turn failed (model, harness or tool-chain error). */
  error: string | null
  usage: TokenUsage | null
  model: string | null
  harnessVersion: string | null
  toolCalls: number
  toolErrors: number
  /** complete when the stream ended with the CLI's result line, partial when it was cut. */
  capture: 'complete' | 'partial' | 'failed'
}

export interface StreamParser {
  /** Feeds one raw stdout line; returns the normalized events it yields (possibly none). */
  push(line: string): SessionEvent[]
  /** Called after the process exited with its exit code. */
  finish(exitCode: number | null): TurnOutcome
}

export interface HarnessAdapter {
  readonly id: Harness
  /** The raw stream's format name for `X-Session-Format`. */
  readonly format: Harness
  buildTurn(spec: TurnSpec): TurnCommand
  createParser(): StreamParser
}
