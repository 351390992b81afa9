/**
 * harness_2: the Codex CLI (`codex exec --json`), talking to the gateway through a custom model
 * provider with the Responses wire API. Stream format, config and pitfalls:
 * /work/shared/research/harness-clis.md section 3; verified against codex 0.169.0.
 */
import { join, posix } from 'node:path'
import { SCRIPTED_MODEL } from '../gateway/wire'
import {
  BUNDLED_MODULES,
  nearestEffort,
  DEFAULT_PATH,
  event,
  jsonObject,
  num,
  packageVersion,
  JsonLineParser,
  PROMPT_FILE,
  str,
  usageEvent,
  withPromptOnStdin,
  type Json,
} from './common'
import {
  mcpUrl,
  type HarnessAdapter,
  type HarnessEvent,
  type TokenUsage,
  type TurnCommand,
  type TurnOutcome,
  type TurnSpec,
} from './harness'
import { isObject } from '../domain/values'

const AGENT = 'harness_2'
export const CODEX_PACKAGE = '@openai/codex'
/** Codex's tool for shell commands; its stream reports calls only as `command_execution` items. */
const SHELL_TOOL = 'exec_command'
/** `model_reasoning_effort` values; the catalog's other levels map to the nearest one. */
const REASONING_EFFORTS = ['minimal', 'low', 'medium', 'high', 'xhigh']

/**
 * Model metadata for `scripted`. Without an entry Codex warns on every turn ("Model metadata …
 * not found") as an error item; the file replaces Codex's built-in list, so it is only written
 * for the scripted model.
 */
const SCRIPTED_CATALOG = {
  models: [
    {
      slug: SCRIPTED_MODEL,
      display_name: 'Scripted (agentd)',
      description: "agentd's scripted test model",
      base_instructions: 'You are Codex, a coding agent. The model is agentd’s scripted model: it follows the script in the prompt.',
      default_reasoning_level: 'medium',
      supported_reasoning_levels: ['low', 'medium', 'high'].map((effort) => ({ effort, description: effort })),
      shell_type: 'shell_command',
      visibility: 'list',
      supported_in_api: true,
      priority: 1,
      context_window: 272_000,
      truncation_policy: { mode: 'tokens', limit: 10_000 },
      supports_parallel_tool_calls: false,
      input_modalities: ['text'],
      experimental_supported_tools: [],
      support_verbosity: false,
      supports_reasoning_summaries: true,
      default_reasoning_summary: 'auto',
      service_tiers: [{ id: 'priority', name: 'Fast', description: 'Fast mode' }],
      additional_speed_tiers: ['fast'],
    },
  ],
}

/** The native executable of the platform package (`bin/codex.js` is only a Node launcher for it). */
export function codexBinPath(modules = BUNDLED_MODULES): string {
  const arm = process.arch === 'arm64'
  const triple = arm ? 'aarch64-unknown-linux-musl' : 'x86_64-unknown-linux-musl'
  return join(modules, '@openai', arm ? 'codex-linux-arm64' : 'codex-linux-x64', 'vendor', triple, 'bin', 'codex')
}

export const codexAdapter: HarnessAdapter = {
  id: AGENT,
  // $CODEX_HOME/skills (CODEX_HOME is ~/.codex here).
  skillsDir: '.codex/skills',
  buildTurn,
  createParser: (spec) => new CodexStreamParser(spec),
}

export function buildTurn(spec: TurnSpec): TurnCommand {
  const codexHome = posix.join(spec.home, '.codex')
  const files: Record<string, string> = { '.codex/config.toml': configToml(spec, codexHome), [PROMPT_FILE]: spec.prompt }
  if (spec.model === SCRIPTED_MODEL) files['.codex/agentd-models.json'] = JSON.stringify(SCRIPTED_CATALOG)
  const argv = [codexBinPath(spec.cliRoot), 'exec']
  if (spec.resumeId) argv.push('resume')
  argv.push('--json', '--skip-git-repo-check')
  if (spec.outputSchema) {
    // Codex sends it as the Responses `text.format` json_schema; the provider enforces it.
    files['.codex/output-schema.json'] = JSON.stringify(spec.outputSchema)
    argv.push('--output-schema', posix.join(codexHome, 'output-schema.json'))
  }
  if (spec.resumeId) argv.push(spec.resumeId)
  // `-`: the prompt is read from stdin (see withPromptOnStdin), so it is never in argv.
  argv.push('-')
  return {
    argv: withPromptOnStdin(spec.home, argv),
    env: {
      HOME: spec.home,
      CODEX_HOME: codexHome,
      PATH: process.env.PATH ?? DEFAULT_PATH,
      AGENTD_GATEWAY_KEY: spec.gatewayToken,
    },
    files,
  }
}

/**
 * config.toml, rewritten before every turn. The gateway is a custom provider (Codex ignores
 * OPENAI_BASE_URL); its own sandbox is off because ours is outside; update checks, analytics,
 * feedback and the curated-plugin sync (which reaches GitHub) are off.
 */
function configToml(spec: TurnSpec, codexHome: string): string {
  const q = (value: string) => JSON.stringify(value) // a JSON string is a valid TOML basic string
  const lines = [
    '# Written by agentd before every turn.',
    `model = ${q(spec.model)}`,
    'model_provider = "agentd"',
    'approval_policy = "never"',
    'sandbox_mode = "danger-full-access"',
    'check_for_update_on_startup = false',
  ]
  if (spec.model === SCRIPTED_MODEL) lines.push(`model_catalog_json = ${q(posix.join(codexHome, 'agentd-models.json'))}`)
  const effort = nearestEffort(spec.effort, REASONING_EFFORTS)
  if (effort) lines.push(`model_reasoning_effort = ${q(effort)}`)
  if (spec.speed === 'fast') lines.push('service_tier = "fast"')
  lines.push(
    '',
    '[model_providers.agentd]',
    'name = "agentd model gateway"',
    `base_url = ${q(`${spec.gatewayUrl}/v1`)}`,
    'env_key = "AGENTD_GATEWAY_KEY"',
    'wire_api = "responses"',
    // Codex's own retries, as against OpenAI: a 503 from a gateway handing the turn over to the
    // next start (or a provider's 5xx, or a cut stream) is tried again. A scripted failure is a
    // 400, which no retry repeats.
    'request_max_retries = 4',
    'stream_max_retries = 5',
    '',
    '[analytics]',
    'enabled = false',
    '',
    '[feedback]',
    'enabled = false',
    '',
    '[features]',
    'plugins = false',
    'shell_snapshot = false',
    '',
  )
  // Tool servers through the gateway's egress proxy, with the gateway key as their bearer token.
  for (const name of spec.mcpServers ?? [])
    lines.push(`[mcp_servers.${q(name)}]`, `url = ${q(mcpUrl(spec, name))}`, 'bearer_token_env_var = "AGENTD_GATEWAY_KEY"', '')
  return lines.join('\n')
}

class CodexStreamParser extends JsonLineParser {
  private threadId: string | null = null
  private lastMessage: string | null = null
  private usage: TokenUsage | null = null
  private ended: 'completed' | 'failed' | null = null
  private failure: string | null = null
  private lastError: string | null = null
  private readonly started = new Set<string>()
  private readonly model: string | null
  private readonly version: string | null

  constructor(private readonly spec?: TurnSpec) {
    super()
    this.model = spec?.model ?? null
    this.version = packageVersion(spec?.cliRoot ?? BUNDLED_MODULES, CODEX_PACKAGE)
  }

  protected onEvent(raw: Json): HarnessEvent[] {
    switch (raw.type) {
      case 'thread.started': {
        this.threadId = str(raw.thread_id) ?? this.threadId
        const init = event(AGENT, 'init', { model: this.model ?? undefined })
        // The stream does not echo the prompt; it is reported here, where Gemini's stream has it.
        return this.spec ? [init, event(AGENT, 'message', { role: 'user', content: this.spec.prompt })] : [init]
      }
      case 'item.started':
        return isObject(raw.item) ? this.itemStarted(raw.item) : []
      case 'item.completed':
        return isObject(raw.item) ? this.itemCompleted(raw.item) : []
      case 'turn.completed':
        return this.turnCompleted(raw)
      case 'turn.failed': {
        this.ended = 'failed'
        this.failure = errorMessage(isObject(raw.error) ? raw.error.message : undefined) ?? 'the turn failed'
        // The failure usually repeats the error line just before it; one error event is enough.
        const repeated = this.failure === this.lastError
        return [...(repeated ? [] : [event(AGENT, 'error', { content: this.failure })]), event(AGENT, 'result', { success: false })]
      }
      case 'error':
        // Also retries ("Reconnecting… 2/5"); whether the turn fails is told by turn.failed.
        this.lastError = errorMessage(raw.message) ?? 'error'
        return [event(AGENT, 'error', { content: this.lastError })]
      default:
        return []
    }
  }

  finish(exitCode: number | null): TurnOutcome {
    const completed = this.ended === 'completed'
    const exit = exitCode === null ? 'was killed' : `exited with code ${exitCode}`
    const answer = completed ? this.lastMessage : null
    return {
      resumeId: this.threadId,
      answerText: answer,
      // With --output-schema the final message is the JSON object itself.
      structured: this.spec?.outputSchema ? jsonObject(answer) : null,
      error: completed ? null : (this.failure ?? `codex ${exit} before finishing the turn`),
      usage: this.usage,
      model: this.model,
      harnessVersion: this.version,
      ...this.tally(this.ended !== null),
    }
  }

  private itemStarted(item: Json): HarnessEvent[] {
    const use = toolUse(item)
    if (!use) return []
    this.started.add(String(item.id))
    this.toolCalls++
    return [use]
  }

  private itemCompleted(item: Json): HarnessEvent[] {
    switch (item.type) {
      case 'reasoning':
        return [event(AGENT, 'thinking', { content: str(item.text) ?? '' })]
      case 'agent_message':
        this.lastMessage = str(item.text) ?? ''
        return [event(AGENT, 'message', { role: 'assistant', content: this.lastMessage })]
      case 'error':
        // A non-fatal warning item, e.g. unknown model metadata.
        return [event(AGENT, 'error', { content: str(item.message) ?? 'warning' })]
      default: {
        const result = toolResult(item)
        if (!result) return []
        // Some item types arrive only completed; their call is reported just before the result.
        const events = this.started.has(String(item.id)) ? [] : this.itemStarted(item)
        if (!result.success) this.toolErrors++
        return [...events, result]
      }
    }
  }

  private turnCompleted(raw: Json): HarnessEvent[] {
    this.ended = 'completed'
    const events: HarnessEvent[] = []
    if (isObject(raw.usage)) {
      this.usage = perTurn(threadUsage(raw.usage), this.spec?.priorUsage)
      events.push(usageEvent(AGENT, this.usage, this.model))
    }
    events.push(event(AGENT, 'result', { content: this.lastMessage ?? undefined, success: true }))
    return events
  }
}

/** A tool call item as `tool_use`; null for items that are not tool calls. */
function toolUse(item: Json): HarnessEvent | null {
  const callId = str(item.id)
  switch (item.type) {
    case 'command_execution': {
      const command = str(item.command) ?? ''
      return event(AGENT, 'tool_use', { callId, tool: SHELL_TOOL, command, args: { command } })
    }
    case 'file_change': {
      const changes = Array.isArray(item.changes) ? item.changes.filter(isObject) : []
      return event(AGENT, 'tool_use', { callId, tool: 'apply_patch', path: str(changes[0]?.path), args: { changes } })
    }
    case 'mcp_tool_call': {
      const args = isObject(item.arguments) ? item.arguments : {}
      return event(AGENT, 'tool_use', { callId, tool: `${str(item.server) ?? 'mcp'}.${str(item.tool) ?? 'tool'}`, args })
    }
    case 'web_search':
      return event(AGENT, 'tool_use', { callId, tool: 'web_search', args: { query: str(item.query) ?? '' } })
    default:
      return null
  }
}

/**
 * A completed tool item as `tool_result`. A command succeeds only when it exited 0: Codex's own
 * status is `failed` then too, but the exit code is the real outcome.
 */
function toolResult(item: Json): HarnessEvent | null {
  const callId = str(item.id)
  switch (item.type) {
    case 'command_execution': {
      const exitCode = typeof item.exit_code === 'number' ? item.exit_code : undefined
      const success = item.status === 'completed' && exitCode === 0
      return event(AGENT, 'tool_result', { callId, output: str(item.aggregated_output) ?? '', success, exitCode })
    }
    case 'file_change':
      return event(AGENT, 'tool_result', { callId, success: item.status === 'completed' })
    case 'mcp_tool_call': {
      const error = isObject(item.error) ? str(item.error.message) : undefined
      const output = error ?? (item.result === undefined ? undefined : JSON.stringify(item.result))
      return event(AGENT, 'tool_result', { callId, output, success: item.status === 'completed' && error === undefined })
    }
    case 'web_search':
      return event(AGENT, 'tool_result', { callId, success: true })
    default:
      return null
  }
}

/** Codex's usage in agentd's terms: its `input_tokens` include the cached ones. */
function threadUsage(usage: Json): TokenUsage {
  const cached = num(usage.cached_input_tokens)
  return {
    input: Math.max(0, num(usage.input_tokens) - cached),
    output: num(usage.output_tokens),
    cacheRead: cached,
    cacheWrite: num(usage.cache_write_input_tokens),
    reasoning: num(usage.reasoning_output_tokens),
  }
}

/** On a resumed thread Codex reports totals since the thread began; this turn's share is the rest. */
function perTurn(total: TokenUsage, prior: TokenUsage | undefined): TokenUsage {
  if (!prior) return total
  const minus = (a: number, b: number) => Math.max(0, a - b)
  return {
    input: minus(total.input, prior.input),
    output: minus(total.output, prior.output),
    cacheRead: minus(total.cacheRead, prior.cacheRead),
    cacheWrite: minus(total.cacheWrite, prior.cacheWrite),
    reasoning: minus(total.reasoning, prior.reasoning),
  }
}

/** Codex passes API errors through as their JSON body; the provider's sentence is inside. */
function errorMessage(text: unknown): string | undefined {
  if (typeof text !== 'string') return undefined
  try {
    const body: unknown = JSON.parse(text)
    if (isObject(body) && isObject(body.error) && typeof body.error.message === 'string') return body.error.message
  } catch {
    // not JSON: the sentence itself
  }
  return text
}
