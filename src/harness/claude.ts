/**
 * harness_1: the Claude Code CLI in headless `-p` mode with `--output-format stream-json`.
 * Stream format and pitfalls: docs in /work/shared/research/harness-clis.md section 2; verified
 * against claude 2.1.197.
 */
import { join, posix } from 'node:path'
import type { SessionEvent } from '../domain/session-event'
import {
  BUNDLED_MODULES,
  nearestEffort,
  DEFAULT_PATH,
  event,
  JsonLineParser,
  PROMPT_FILE,
  startedAheadArgv,
  startedAheadEnv,
  str,
  withPromptOnStdin,
  type Json,
} from './common'
import {
  mcpUrl,
  type HarnessAdapter,
  type HarnessEvent,
  type StartAhead,
  type TokenUsage,
  type TurnCommand,
  type TurnOutcome,
  type TurnSpec,
} from './harness'

/** The session's tool servers, for `--mcp-config` (home-relative). */
const MCP_CONFIG = '.claude/agentd-mcp.json'
import { isObject } from '../domain/values'

const AGENT = 'harness_1'
export const CLAUDE_PACKAGE = '@anthropic-ai/claude-code'
/** What `--effort` accepts; the catalog's other levels map to the nearest one. */
const EFFORT_FLAGS = ['low', 'medium', 'high', 'xhigh', 'max']

/** The CLI binary the npm package installs (a native executable, no Node needed). */
export function claudeBinPath(modules = BUNDLED_MODULES): string {
  return join(modules, CLAUDE_PACKAGE, 'bin', 'claude.exe')
}

/**
 * Claude Code started ahead of its session, in a warm sandbox (src/runtime/started-cli.ts): loaded,
 * then waiting on its stdin (`--input-format stream-json`) for its first message, one stream-json
 * user line. At that message's end of input it answers it and exits, as a first turn's CLI does.
 */
const startAhead: StartAhead = {
  command(at, model, key) {
    const cli = [claudeBinPath(), '-p', '--input-format', 'stream-json', '--output-format', 'stream-json', '--verbose']
    cli.push('--dangerously-skip-permissions', '--model', model)
    return {
      argv: startedAheadArgv(cli),
      files: {},
      env: { ...cliEnvironment(at.home, at.gatewayUrl, key), ...startedAheadEnv(at.gatewayUrl, key) },
    }
  },
  firstMessage: (prompt) => `${JSON.stringify({ type: 'user', message: { role: 'user', content: prompt } })}\n`,
}

export const claudeAdapter: HarnessAdapter = {
  id: AGENT,
  // Claude Code's personal skills (its init event lists each as a slash command).
  skillsDir: '.claude/skills',
  buildTurn,
  createParser: (spec) => new ClaudeStreamParser(spec?.prompt),
  startAhead,
}

export function buildTurn(spec: TurnSpec): TurnCommand {
  const argv = [
    claudeBinPath(spec.cliRoot),
    '-p',
    '--output-format',
    'stream-json',
    '--verbose',
    '--dangerously-skip-permissions',
    '--model',
    spec.model,
  ]
  if (spec.resumeId) argv.push('--resume', spec.resumeId)
  const effort = nearestEffort(spec.effort, EFFORT_FLAGS)
  if (effort) argv.push('--effort', effort)
  // Fast mode is a setting, not a flag; the CLI ignores it for models without a fast tier.
  if (spec.speed === 'fast') argv.push('--settings', JSON.stringify({ fastMode: true }))
  // The CLI offers a StructuredOutput tool for this schema; the result line carries the object.
  if (spec.outputSchema) argv.push('--json-schema', JSON.stringify(spec.outputSchema))
  const files: Record<string, string> = { [PROMPT_FILE]: spec.prompt }
  if (spec.mcpServers?.length) {
    // A file, not an argument: the gateway key it carries stays out of argv.
    const servers = spec.mcpServers.map((name) => [
      name,
      { type: 'http', url: mcpUrl(spec, name), headers: { Authorization: `Bearer ${spec.gatewayToken}` } },
    ])
    files[MCP_CONFIG] = JSON.stringify({ mcpServers: Object.fromEntries(servers) })
    argv.push('--mcp-config', posix.join(spec.home, MCP_CONFIG), '--strict-mcp-config')
  }
  // No prompt argument: `-p` reads it from stdin (see withPromptOnStdin), so it is never in argv.
  return {
    argv: withPromptOnStdin(spec.home, argv),
    files,
    env: cliEnvironment(spec.home, spec.gatewayUrl, spec.gatewayToken),
  }
}

/** The CLI's environment: its home, the gateway and its key, and nothing that phones home. */
function cliEnvironment(home: string, gatewayUrl: string, key: string): Record<string, string> {
  return {
    HOME: home,
    PATH: process.env.PATH ?? DEFAULT_PATH,
    ANTHROPIC_BASE_URL: gatewayUrl,
    ANTHROPIC_API_KEY: key,
    // --dangerously-skip-permissions refuses to run as root unless told it is sandboxed.
    IS_SANDBOX: '1',
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
  }
}

class ClaudeStreamParser extends JsonLineParser {
  private resumeId: string | null = null
  private initModel: string | null = null
  private replyModel: string | null = null
  private version: string | null = null
  private apiError: string | null = null
  private result: Json | null = null
  private readonly bashCalls = new Set<string>()

  /** `prompt`: the turn's prompt, which the stream does not echo; reported after init as the user's message. */
  constructor(private prompt?: string) {
    super()
  }

  protected onEvent(event: Json): HarnessEvent[] {
    if (typeof event.session_id === 'string') this.resumeId ??= event.session_id
    switch (event.type) {
      case 'system':
        return this.system(event)
      case 'assistant':
        return this.assistant(event)
      case 'user':
        return this.user(event)
      case 'result':
        return this.finalResult(event)
      default:
        return []
    }
  }

  finish(exitCode: number | null): TurnOutcome {
    const result = this.result
    const isError = result ? result.is_error === true : true
    return {
      resumeId: this.resumeId,
      answerText: result && !isError && typeof result.result === 'string' ? result.result : null,
      structured: result && isObject(result.structured_output) ? result.structured_output : null,
      error: isError ? this.errorText(result, exitCode) : null,
      usage: result ? tokenUsage(result.usage) : null,
      model: this.replyModel ?? this.initModel,
      harnessVersion: this.version,
      ...this.tally(result !== null),
    }
  }

  private system(event: Json): HarnessEvent[] {
    if (event.subtype === 'init') {
      this.initModel = str(event.model) ?? null
      this.version = str(event.claude_code_version) ?? null
      const init = ev('init', { model: str(event.model), content: str(event.cwd) })
      const prompt = this.prompt
      this.prompt = undefined
      return prompt === undefined ? [init] : [init, ev('message', { role: 'user', content: prompt })]
    }
    if (event.subtype === 'hook_response') {
      return [ev('hook', { tool: str(event.hook_name), output: str(event.output), success: event.exit_code === 0 })]
    }
    return []
  }

  private assistant(event: Json): HarnessEvent[] {
    const message = isObject(event.message) ? event.message : {}
    // An API error is reported as a fake assistant message from the `<synthetic>` model.
    const synthetic = message.model === '<synthetic>'
    if (!synthetic && typeof message.model === 'string') this.replyModel = message.model
    return blocks(message.content).flatMap((block): SessionEvent[] => {
      if (block.type === 'thinking') return [ev('thinking', { content: str(block.thinking) ?? '' })]
      if (block.type === 'text' && synthetic) {
        this.apiError = str(block.text) ?? this.apiError
        return [ev('error', { content: str(block.text) ?? '' })]
      }
      if (block.type === 'text') return [ev('message', { role: 'assistant', content: str(block.text) ?? '' })]
      if (block.type === 'tool_use') {
        this.toolCalls++
        if (block.name === 'Bash' && typeof block.id === 'string') this.bashCalls.add(block.id)
        const input = isObject(block.input) ? block.input : {}
        return [
          ev('tool_use', {
            callId: str(block.id),
            tool: str(block.name),
            args: input,
            command: str(input.command),
            path: str(input.file_path) ?? str(input.notebook_path) ?? str(input.path),
          }),
        ]
      }
      return []
    })
  }

  private user(event: Json): HarnessEvent[] {
    const message = isObject(event.message) ? event.message : {}
    if (typeof message.content === 'string') return [ev('message', { role: 'user', content: message.content })]
    return blocks(message.content).flatMap((block): SessionEvent[] => {
      if (block.type === 'text') return [ev('message', { role: 'user', content: str(block.text) ?? '' })]
      if (block.type !== 'tool_result') return []
      const success = block.is_error !== true
      if (!success) this.toolErrors++
      const callId = str(block.tool_use_id)
      const output = resultText(block.content)
      const exitCode = callId && this.bashCalls.has(callId) ? bashExitCode(output, success) : undefined
      return [ev('tool_result', { callId, output, success, exitCode })]
    })
  }

  private finalResult(event: Json): HarnessEvent[] {
    this.result = event
    const events: SessionEvent[] = []
    const usage = tokenUsage(event.usage)
    if (usage) {
      events.push(
        ev('usage', {
          model: this.replyModel ?? this.initModel ?? undefined,
          inputTokens: usage.input,
          outputTokens: usage.output,
          cacheReadTokens: usage.cacheRead,
          cacheCreationTokens: usage.cacheWrite,
        }),
      )
    }
    const failed = event.is_error === true
    const error = failed ? this.errorText(event, null) : null
    // An API error was already reported from its synthetic assistant message.
    if (error !== null && error !== this.apiError) events.push(ev('error', { content: error }))
    events.push(ev('result', { content: str(event.result), success: !failed }))
    return events
  }

  private errorText(result: Json | null, exitCode: number | null): string {
    if (result) {
      // `result` holds the message for API errors ("API Error: 400 …"); other failures list `errors`.
      const errors = Array.isArray(result.errors) ? result.errors.filter((e) => typeof e === 'string') : []
      return str(result.result) || errors.join('; ') || this.apiError || `claude failed (${String(result.subtype)})`
    }
    const exit = exitCode === null ? 'was killed' : `exited with code ${exitCode}`
    return this.apiError ?? `claude ${exit} before reporting a result`
  }
}

function tokenUsage(value: unknown): TokenUsage | null {
  if (!isObject(value)) return null
  const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0)
  return {
    input: n(value.input_tokens),
    output: n(value.output_tokens),
    cacheRead: n(value.cache_read_input_tokens),
    cacheWrite: n(value.cache_creation_input_tokens),
    // Claude does not report thinking tokens separately; they are part of output_tokens.
    reasoning: 0,
  }
}

/** A tool_result's content is a string or a list of blocks (text, images). */
function resultText(content: unknown): string {
  if (typeof content === 'string') return content
  return blocks(content)
    .map((b) => (b.type === 'text' ? (str(b.text) ?? '') : `[${b.type}]`))
    .join('\n')
}

/**
 * A failed Bash call's result starts with "Exit code N" (the CLI's wording); a successful one
 * exited 0. Null when the call failed without running (denied, interrupted).
 */
function bashExitCode(output: string, success: boolean): number | undefined {
  if (success) return 0
  const match = /^(?:Error: )?Exit code (\d+)/.exec(output)
  return match ? Number(match[1]) : undefined
}

function ev(type: SessionEvent['type'], fields: Omit<Partial<HarnessEvent>, 'type' | 'agent' | 'timestamp'>): HarnessEvent {
  return event(AGENT, type, fields)
}

function blocks(content: unknown): (Json & { type?: unknown })[] {
  return Array.isArray(content) ? content.filter(isObject) : []
}
