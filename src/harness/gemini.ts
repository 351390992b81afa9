/**
 * harness_3: the Gemini CLI in headless mode (`-p … --output-format stream-json`). Settings,
 * stream format and pitfalls: /work/shared/research/harness-clis.md section 4; verified against
 * gemini-cli 0.61.0.
 */
import { join } from 'node:path'
import {
  BUNDLED_MODULES,
  nearestEffort,
  DEFAULT_PATH,
  event,
  num,
  packageVersion,
  JsonLineParser,
  PROMPT_FILE,
  startedAheadArgv,
  startedAheadEnv,
  str,
  usageEvent,
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
import { isObject } from '../domain/values'
import { cliNode } from './node-runtime'

const AGENT = 'harness_3'
export const GEMINI_PACKAGE = '@google/gemini-cli'
const SHELL_TOOL = 'run_shell_command'
/** Gemini's `thinkingLevel` (upper case there); the catalog's other levels map to the nearest one. */
const THINKING_LEVELS = ['low', 'medium', 'high']
/** Lines the shell tool appends after a command's output in debug mode (see buildTurn), last first. */
const SHELL_TRAILER = ['Process Group PGID', 'Background PIDs', 'Signal', 'Exit Code', 'Error']

/** The CLI is a Node bundle; Node ≥ 20 is on every machine agentd runs on (contract section 1). */
export function geminiEntryPath(modules = BUNDLED_MODULES): string {
  return join(modules, '@google', 'gemini-cli', 'bundle', 'gemini.js')
}

/**
 * Gemini CLI started ahead of its session, in a warm sandbox (src/runtime/started-cli.ts): it loads
 * and initialises (0.43 s from its message to its first model request on gVisor, against 1.93 s
 * started with its turn: docs/decisions.md), then reads its stdin to the end as its prompt. It
 * gives up on a stdin silent for 500 ms once it reads it (its readStdin), so a newline is given
 * at once, ahead of the message: the prompt it sends starts with that newline (PRIMED), so a prompt
 * that is a command (`/…`) runs on a CLI started with its turn.
 */
const PRIMED = '\n'
const startAhead: StartAhead = {
  command(at, model, key) {
    const spec = { home: at.home, gatewayUrl: at.gatewayUrl, gatewayToken: key, model }
    return {
      argv: startedAheadArgv(cliArgv(spec), PRIMED),
      env: { ...cliEnvironment(spec), ...startedAheadEnv(at.gatewayUrl, key) },
      files: { '.gemini/settings.json': JSON.stringify(settings(spec), null, 2) },
    }
  },
  firstMessage: (prompt) => prompt,
  // A prompt starting with `/` is a command to the CLI (its isSlashCommand); after the newline it
  // would be text to the model.
  accepts: (prompt) => !prompt.startsWith('/'),
}

export const geminiAdapter: HarnessAdapter = {
  id: AGENT,
  // Gemini CLI's user skills folder (skills are on unless settings turn them off).
  skillsDir: '.gemini/skills',
  buildTurn,
  createParser: (spec) => new GeminiStreamParser(spec),
  startAhead,
}

export function buildTurn(spec: TurnSpec): TurnCommand {
  // No --prompt: with stdin not a terminal the CLI runs headless and takes stdin as the prompt
  // (see withPromptOnStdin), so it is never in argv.
  return {
    argv: withPromptOnStdin(spec.home, cliArgv(spec)),
    env: cliEnvironment(spec),
    files: { '.gemini/settings.json': JSON.stringify(settings(spec), null, 2), [PROMPT_FILE]: spec.prompt },
  }
}

type CliFacts = Pick<TurnSpec, 'home' | 'gatewayUrl' | 'gatewayToken' | 'model' | 'resumeId' | 'cliRoot'>

function cliArgv(spec: CliFacts): string[] {
  const argv = [cliNode().path, geminiEntryPath(spec.cliRoot), '--output-format', 'stream-json', '--yolo', '--skip-trust']
  // An explicit model also skips the model router's classifier call.
  argv.push('--model', spec.model)
  // Debug mode makes the shell tool report its exit code ("Exit Code: 1") in the stream; otherwise
  // a failing command that printed anything is indistinguishable from a successful one.
  argv.push('--debug')
  if (spec.resumeId) argv.push('--resume', spec.resumeId)
  return argv
}

function cliEnvironment(spec: CliFacts): Record<string, string> {
  const node = cliNode()
  return {
    HOME: spec.home,
    PATH: process.env.PATH ?? DEFAULT_PATH,
    GOOGLE_GEMINI_BASE_URL: spec.gatewayUrl,
    GEMINI_API_KEY: spec.gatewayToken,
    // Skips the CLI re-launching itself with a bigger heap: about 0.8 s per turn.
    GEMINI_CLI_NO_RELAUNCH: 'true',
    // Read-only inside a sandbox: the bundle's compiled code, filled by agentd on the host (node-runtime.ts).
    ...(node.compileCache ? { NODE_COMPILE_CACHE: node.compileCache } : {}),
  }
}

/**
 * settings.json, rewritten before every turn. The auth type must be forced: with only a base URL
 * the CLI picks the "gateway" type, which headless mode rejects. Updates and telemetry are off.
 */
function settings(spec: Pick<TurnSpec, 'model' | 'effort' | 'mcpServers' | 'gatewayUrl' | 'gatewayToken'>): Json {
  const level = nearestEffort(spec.effort, THINKING_LEVELS)?.toUpperCase()
  return {
    security: { auth: { selectedType: 'gemini-api-key' } },
    general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
    privacy: { usageStatisticsEnabled: false },
    telemetry: { enabled: false },
    // Tool servers through the gateway's egress proxy, with the gateway key as their bearer token.
    ...(spec.mcpServers?.length
      ? {
          mcpServers: Object.fromEntries(
            spec.mcpServers.map((name) => [
              name,
              { httpUrl: mcpUrl(spec, name), headers: { Authorization: `Bearer ${spec.gatewayToken}` }, trust: true },
            ]),
          ),
        }
      : {}),
    ...(level
      ? {
          modelConfigs: {
            customOverrides: [
              { match: { model: spec.model }, modelConfig: { generateContentConfig: { thinkingConfig: { thinkingLevel: level } } } },
            ],
          },
        }
      : {}),
  }
}

class GeminiStreamParser extends JsonLineParser {
  private sessionId: string | null = null
  private model: string | null
  private result: Json | null = null
  private answer: string[] = []
  /** Assistant text arrives in `delta` chunks; they are joined into one message. */
  private pending: { text: string; timestamp?: string } | null = null
  private readonly shellCalls = new Set<string>()
  private usage: TokenUsage | null = null
  private readonly version: string | null

  constructor(private readonly spec?: TurnSpec) {
    super()
    this.model = spec?.model ?? null
    this.version = packageVersion(spec?.cliRoot ?? BUNDLED_MODULES, GEMINI_PACKAGE)
  }

  /** The prompt as the stream echoes it, without the newline a CLI started ahead was primed with. */
  private userText(content: string): string {
    return this.spec && content === `${PRIMED}${this.spec.prompt}` ? this.spec.prompt : content
  }

  protected onEvent(raw: Json): HarnessEvent[] {
    const timestamp = str(raw.timestamp)
    if (raw.type === 'message' && raw.role === 'assistant') {
      const text = str(raw.content) ?? ''
      this.answer.push(text)
      if (this.pending) this.pending.text += text
      else this.pending = { text, timestamp }
      return []
    }
    const events = this.flush()
    // The answer is the text after the last prompt or tool call, not everything said on the way.
    if (raw.type === 'message' || raw.type === 'tool_use' || raw.type === 'tool_result') this.answer = []
    switch (raw.type) {
      case 'init':
        this.sessionId = str(raw.session_id) ?? this.sessionId
        // `auto` means the router picks per request; the model used shows in the result's stats.
        if (str(raw.model) && raw.model !== 'auto') this.model = str(raw.model)!
        events.push(event(AGENT, 'init', { model: str(raw.model) }, timestamp))
        break
      case 'message':
        events.push(event(AGENT, 'message', { role: 'user', content: this.userText(str(raw.content) ?? '') }, timestamp))
        break
      case 'tool_use':
        events.push(this.toolUse(raw, timestamp))
        break
      case 'tool_result':
        events.push(this.toolResult(raw, timestamp))
        break
      case 'error':
        events.push(event(AGENT, 'error', { content: str(raw.message) ?? 'error' }, timestamp))
        break
      case 'result':
        events.push(...this.finalResult(raw, timestamp))
        break
    }
    return events
  }

  finish(exitCode: number | null): TurnOutcome {
    const result = this.result
    const ok = result?.status === 'success'
    const exit = exitCode === null ? 'was killed' : `exited with code ${exitCode}`
    return {
      resumeId: this.sessionId,
      answerText: ok ? this.answer.join('') : null,
      // The Gemini CLI has no schema-constrained answer (output_schema is refused for harness_3).
      structured: null,
      error: ok ? null : (resultError(result) ?? `gemini ${exit} before reporting a result`),
      usage: this.usage,
      model: this.model,
      harnessVersion: this.version,
      ...this.tally(result !== null),
    }
  }

  private flush(): HarnessEvent[] {
    const pending = this.pending
    this.pending = null
    return pending ? [event(AGENT, 'message', { role: 'assistant', content: pending.text }, pending.timestamp)] : []
  }

  private toolUse(raw: Json, timestamp: string | undefined): HarnessEvent {
    this.toolCalls++
    const callId = str(raw.tool_id)
    const tool = str(raw.tool_name)
    const args = isObject(raw.parameters) ? raw.parameters : {}
    if (tool === SHELL_TOOL && callId) this.shellCalls.add(callId)
    return event(
      AGENT,
      'tool_use',
      { callId, tool, args, command: str(args.command), path: str(args.file_path) ?? str(args.absolute_path) ?? str(args.dir_path) },
      timestamp,
    )
  }

  /** The CLI says `success` for a shell command that exited non-zero; the exit code decides. */
  private toolResult(raw: Json, timestamp: string | undefined): HarnessEvent {
    const callId = str(raw.tool_id)
    const error = isObject(raw.error) ? str(raw.error.message) : undefined
    let output = str(raw.output) ?? error
    let exitCode: number | undefined
    if (callId && this.shellCalls.has(callId) && output !== undefined) {
      const shell = shellOutput(output)
      output = shell.output
      exitCode = shell.exitCode
    }
    const success = raw.status === 'success' && (exitCode === undefined || exitCode === 0)
    if (!success) this.toolErrors++
    return event(AGENT, 'tool_result', { callId, output, success, exitCode }, timestamp)
  }

  private finalResult(raw: Json, timestamp: string | undefined): HarnessEvent[] {
    this.result = raw
    const events: HarnessEvent[] = []
    const stats = isObject(raw.stats) ? raw.stats : null
    if (stats) {
      const cached = num(stats.cached)
      this.usage = {
        input: typeof stats.input === 'number' ? stats.input : Math.max(0, num(stats.input_tokens) - cached),
        output: num(stats.output_tokens),
        cacheRead: cached,
        cacheWrite: 0,
        reasoning: 0,
      }
      this.model = mainModel(stats) ?? this.model
      events.push(usageEvent(AGENT, this.usage, this.model, timestamp))
    }
    const error = resultError(raw)
    if (error) events.push(event(AGENT, 'error', { content: error }, timestamp))
    events.push(
      event(
        AGENT,
        'result',
        { content: raw.status === 'success' ? this.answer.join('') : undefined, success: raw.status === 'success' },
        timestamp,
      ),
    )
    return events
  }
}

/**
 * Splits the shell tool's debug-mode report ("Output: …\nExit Code: 1\nProcess Group PGID: 7")
 * into the command's output and exit code. A missing "Exit Code" line means 0.
 */
export function shellOutput(text: string): { output: string; exitCode: number } {
  if (!text.startsWith('Output: ')) {
    // Without debug mode the CLI shows only this line for a failing command that printed nothing.
    const only = /^Command exited with code: (\d+)$/.exec(text)
    return { output: only ? '' : text, exitCode: only ? Number(only[1]) : 0 }
  }
  const lines = text.slice('Output: '.length).split('\n')
  let exitCode = 0
  for (const label of SHELL_TRAILER) {
    if (lines.length < 2 || !lines.at(-1)!.startsWith(`${label}: `)) continue
    const value = lines.pop()!.slice(label.length + 2)
    if (label === 'Exit Code' && /^\d+$/.test(value)) exitCode = Number(value)
  }
  const output = lines.join('\n')
  return { output: output === '(empty)' ? '' : output, exitCode }
}

/** The model that did the work: stats are split per model (router and summary calls included). */
function mainModel(stats: Json): string | null {
  const models = isObject(stats.models) ? Object.entries(stats.models) : []
  let best: [string, number] | null = null
  for (const [name, counts] of models) {
    const total = isObject(counts) ? num(counts.total_tokens) : 0
    if (!best || total > best[1]) best = [name, total]
  }
  return best?.[0] ?? null
}

function resultError(result: Json | null): string | null {
  if (!result || result.status === 'success') return null
  const error = isObject(result.error) ? str(result.error.message) : undefined
  return error === undefined ? `gemini reported status ${String(result.status)}` : apiError(error)
}

/** `[API Error: {"error":{"code":400,"message":"…"}}]` as the sentence inside: `API Error: 400 …`. */
function apiError(message: string): string {
  const wrapped = /^\[API Error: ([\s\S]*)\]$/.exec(message)
  if (!wrapped) return message
  try {
    const body: unknown = JSON.parse(wrapped[1]!)
    if (isObject(body) && isObject(body.error) && typeof body.error.message === 'string') {
      return `API Error: ${typeof body.error.code === 'number' ? `${body.error.code} ` : ''}${body.error.message}`
    }
  } catch {
    // not JSON: keep the CLI's text
  }
  return message.slice(1, -1)
}
