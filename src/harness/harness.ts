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
  /**
   * The node_modules directory holding the CLI's npm package, as the sandbox sees it: a pinned
   * version's install in the harness cache. Absent: the version bundled with agentd.
   */
  cliRoot?: string
  /** Tokens the session's earlier turns used, for CLIs that report thread totals (Codex). */
  priorUsage?: TokenUsage
  /**
   * The session's tool servers by name: each is reached at `${gatewayUrl}/mcp/<name>` with the
   * gateway token as its bearer token (the egress proxy puts on the server's own credential).
   */
  mcpServers?: string[]
  /**
   * Variables of the session's Project for the CLI and everything it starts: its secrets and the
   * egress proxy (src/runtime/environment.ts). The adapter's own variables win over them.
   */
  env?: Record<string, string>
}

/** Where the CLI reaches its tool server `name`: the gateway's egress proxy. */
export const mcpUrl = (spec: Pick<TurnSpec, 'gatewayUrl'>, name: string): string => `${spec.gatewayUrl}/mcp/${encodeURIComponent(name)}`

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

/**
 * A normalized event as a parser emits it. A shell tool's `tool_result` also carries the command's
 * exit code where the CLI reveals it; it is not a field of spec 2.8, so the messages read leaves it
 * out, and the tool-call index reads it.
 */
export type HarnessEvent = SessionEvent & { exitCode?: number }

export interface StreamParser {
  /** Feeds one raw stdout line; returns the normalized events it yields (possibly none). */
  push(line: string): HarnessEvent[]
  /** Called after the process exited with its exit code. */
  finish(exitCode: number | null): TurnOutcome
}

export interface HarnessAdapter {
  readonly id: Harness
  /** Where in the CLI's home it loads a user's skills (one folder per skill, SKILL.md in it). */
  readonly skillsDir: string
  buildTurn(spec: TurnSpec): TurnCommand
  /** A parser for one turn's stdout; `spec` is the turn's, when the parser needs it. */
  createParser(spec?: TurnSpec): StreamParser
  /** How the CLI is started ahead of its session, where it can be (src/runtime/started-cli.ts). */
  readonly startAhead?: StartAhead
}

/**
 * A CLI started ahead in a warm sandbox: loaded, then waiting on its stdin for its first message,
 * which it reads to its end, answers and exits, as a first turn's CLI does. Only CLIs that read
 * their prompt after their own start can be: Codex reads stdin first thing, then starts.
 */
export interface StartAhead {
  /** The CLI on the default settings, its stdin the message curl asks the gateway for under `key`. */
  command(at: { home: string; gatewayUrl: string }, model: string, key: string): TurnCommand
  /** What the CLI's stdin is given for the first turn's prompt. */
  firstMessage(prompt: string): string
  /** Whether the started CLI takes `prompt` as one started with its turn would; absent: always. */
  accepts?(prompt: string): boolean
}
