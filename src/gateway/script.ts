/**
 * The `scripted` model (contract section 3), independent of any wire protocol.
 *
 * It is stateless: every request carries the whole conversation, so the next reply is derived from
 * the latest genuine user message (its script) and the number of assistant replies given since.
 * A reply with plain text and no tool call ends a CLI turn, so non-tool steps (say, think, sleep,
 * usage) ride along with the next tool or terminal step instead of being replies of their own.
 */
import { isObject } from '../domain/values'

export type Step =
  | { say: string }
  | { think: string }
  | { bash: string }
  | { write: { path: string; content: string } }
  | { artifact: { name: string; content: string; content_type?: string } }
  | { sleep: number }
  | { answer: string }
  | { structured: Record<string, unknown> }
  | { fail: string }
  | { usage: { input: number; output: number; cache_read?: number; cache_write?: number } }
  /** agentd's own step: a call of a tool of one of the session's tool servers (shape B connections). */
  | { mcp: { server: string; tool: string; input?: Record<string, unknown> } }
  /**
   * agentd's own step: the final answer is `<text>: ` and the first line of every user message the
   * model was sent in this request, earlier turns' included, joined by ` | `: what the CLI resumed.
   */
  | { recall: string }

/** One entry of the conversation as a protocol adapter sees it. */
export type ConversationEntry =
  /** Text a user wrote (a prompt or follow-up), without injected context. */
  | { role: 'user'; text: string }
  /** A user-side message that only returns tool results to the model. */
  | { role: 'tool' }
  | { role: 'assistant' }

export type ReplyPart =
  | { type: 'thinking'; text: string }
  | { type: 'text'; text: string }
  | { type: 'bash'; command: string }
  | { type: 'write'; path: string; content: string }
  | { type: 'artifact'; name: string; content: string; contentType: string | null }
  | { type: 'structured'; value: Record<string, unknown> }
  | { type: 'mcp'; server: string; tool: string; input: Record<string, unknown> }

export interface TokenCounts {
  input: number
  output: number
  cacheRead: number
  cacheWrite: number
}

export interface Reply {
  /** Thinking and text in script order; at most one tool part (bash, write, artifact, structured), always last. */
  parts: ReplyPart[]
  /** Set when the model answers with an error instead of content; the turn fails with this message. */
  failure: string | null
  /** How long the model stalls before sending this reply. */
  sleepMs: number
  /** Token counts the script asked to report for this reply, replacing the estimate. */
  usage: TokenCounts | null
  /** A recall step's text, until nextReply makes it the answer listing the conversation's user messages. */
  recall?: string
}

export type ScriptParse = { kind: 'none' } | { kind: 'invalid'; reason: string } | { kind: 'valid'; steps: Step[] }

const FENCE = /```agentd-script[^\S\n]*\n([\s\S]*?)```/

const TOOL_STEPS = new Set(['bash', 'write', 'artifact', 'structured', 'mcp'])
const TERMINAL_STEPS = new Set(['answer', 'fail', 'recall'])

/** Finds and validates the first ```agentd-script block of a text. */
export function parseScript(text: string): ScriptParse {
  const match = FENCE.exec(text)
  if (!match) return { kind: 'none' }
  let raw: unknown
  try {
    raw = JSON.parse(match[1] ?? '')
  } catch (err) {
    return { kind: 'invalid', reason: `not valid JSON (${(err as Error).message})` }
  }
  if (!Array.isArray(raw)) return { kind: 'invalid', reason: 'the script must be a JSON array of steps' }
  const steps: Step[] = []
  for (const [i, item] of raw.entries()) {
    const problem = stepProblem(item)
    if (problem) return { kind: 'invalid', reason: `step ${i + 1}: ${problem}` }
    steps.push(item as Step)
  }
  return { kind: 'valid', steps }
}

const INJECTED = /^<([A-Za-z][\w-]*)>[\s\S]*<\/\1>$/

/**
 * True for context a CLI adds to the user's side of the conversation on its own, such as Claude's
 * `<system-reminder>` or Codex's `<environment_context>`: a text wholly wrapped in one tag.
 */
export function isInjectedText(text: string): boolean {
  return INJECTED.test(text.trim())
}

/** Decides the model's next reply from the conversation so far. Pure. */
export function nextReply(conversation: readonly ConversationEntry[]): Reply {
  let userIndex = -1
  for (let i = conversation.length - 1; i >= 0; i--) {
    if (conversation[i]?.role === 'user') {
      userIndex = i
      break
    }
  }
  const user = conversation[userIndex]
  if (!user || user.role !== 'user') return textReply('Done')

  const script = parseScript(user.text)
  if (script.kind === 'none') return textReply(`Done: ${firstLine(user.text)}`)
  if (script.kind === 'invalid') return failReply(`invalid agentd-script: ${script.reason}`)

  const given = assistantReplies(conversation.slice(userIndex + 1))
  const replies = groupSteps(script.steps)
  const reply = replies[given] ?? overrunReply(script.steps)
  const { recall, ...planned } = reply
  if (recall === undefined) return reply
  // A recall step's answer: its text, then the first line of each user message in the conversation.
  const users = conversation.flatMap((entry) => (entry.role === 'user' ? [firstLine(entry.text)] : []))
  return { ...planned, parts: [...planned.parts, { type: 'text', text: `${recall}: ${users.join(' | ')}` }] }
}

/**
 * Splits steps into replies: each reply ends at a tool or terminal step; trailing non-tool steps
 * form a last reply whose text ends the turn.
 */
export function groupSteps(steps: readonly Step[]): Reply[] {
  const replies: Reply[] = []
  let current = emptyReply()
  let open = false
  for (const step of steps) {
    const [kind] = Object.keys(step)
    applyStep(current, step)
    open = true
    if (kind && (TOOL_STEPS.has(kind) || TERMINAL_STEPS.has(kind))) {
      replies.push(current)
      current = emptyReply()
      open = false
      if (TERMINAL_STEPS.has(kind)) return replies
    }
  }
  if (open) {
    // A script without an answer still has to end the turn with text: the last thing it said.
    if (!current.parts.some((p) => p.type === 'text')) current.parts.push({ type: 'text', text: lastSaid(steps) ?? 'Done' })
    replies.push(current)
  }
  return replies
}

/** ceil(characters / 4), the scripted model's token estimate. */
export function estimateTokens(chars: number): number {
  return Math.ceil(chars / 4)
}

/** Characters of a reply's content, for the default output-token estimate. */
export function replyChars(reply: Reply): number {
  let chars = reply.failure?.length ?? 0
  for (const part of reply.parts) {
    if (part.type === 'thinking' || part.type === 'text') chars += part.text.length
    else if (part.type === 'bash') chars += part.command.length
    else if (part.type === 'structured') chars += JSON.stringify(part.value).length
    else if (part.type === 'mcp') chars += part.tool.length + JSON.stringify(part.input).length
    else chars += part.content.length
  }
  return chars
}

/** The token counts to report: the script's override, else estimates from request and reply size. */
export function replyUsage(reply: Reply, requestChars: number): TokenCounts {
  return reply.usage ?? { input: estimateTokens(requestChars), output: estimateTokens(replyChars(reply)), cacheRead: 0, cacheWrite: 0 }
}

function applyStep(reply: Reply, step: Step): void {
  if ('say' in step) reply.parts.push({ type: 'text', text: step.say })
  else if ('think' in step) reply.parts.push({ type: 'thinking', text: step.think })
  else if ('answer' in step) reply.parts.push({ type: 'text', text: step.answer })
  else if ('recall' in step) reply.recall = step.recall
  else if ('bash' in step) reply.parts.push({ type: 'bash', command: step.bash })
  else if ('write' in step) reply.parts.push({ type: 'write', path: step.write.path, content: step.write.content })
  else if ('artifact' in step) {
    const { name, content, content_type } = step.artifact
    reply.parts.push({ type: 'artifact', name, content, contentType: content_type ?? null })
  } else if ('structured' in step) reply.parts.push({ type: 'structured', value: step.structured })
  else if ('mcp' in step) reply.parts.push({ type: 'mcp', server: step.mcp.server, tool: step.mcp.tool, input: step.mcp.input ?? {} })
  else if ('sleep' in step) reply.sleepMs += step.sleep
  else if ('fail' in step) reply.failure = step.fail
  else if ('usage' in step) {
    const u = step.usage
    reply.usage = { input: u.input, output: u.output, cacheRead: u.cache_read ?? 0, cacheWrite: u.cache_write ?? 0 }
  }
}

/** The CLI came back after the script's last reply (e.g. with a tool result); close the turn. */
function overrunReply(steps: readonly Step[]): Reply {
  const last = steps[steps.length - 1]
  if (last && 'structured' in last) return textReply(JSON.stringify(last.structured))
  return textReply(lastSaid(steps) ?? 'Done')
}

/** Consecutive assistant entries count as one reply: some CLIs split one reply per content block. */
function assistantReplies(after: readonly ConversationEntry[]): number {
  let count = 0
  let previous: ConversationEntry['role'] | null = null
  for (const entry of after) {
    if (entry.role === 'assistant' && previous !== 'assistant') count++
    previous = entry.role
  }
  return count
}

function lastSaid(steps: readonly Step[]): string | null {
  for (let i = steps.length - 1; i >= 0; i--) {
    const step = steps[i]
    if (step && 'say' in step) return step.say
  }
  return null
}

function firstLine(text: string): string {
  return text.trim().split('\n')[0]?.trim() ?? ''
}

function emptyReply(): Reply {
  return { parts: [], failure: null, sleepMs: 0, usage: null }
}

function textReply(text: string): Reply {
  return { ...emptyReply(), parts: [{ type: 'text', text }] }
}

function failReply(message: string): Reply {
  return { ...emptyReply(), failure: message }
}

function stepProblem(item: unknown): string | null {
  if (!isObject(item)) return 'a step must be an object such as {"say": "..."}'
  const keys = Object.keys(item)
  if (keys.length !== 1) return `a step must have exactly one key, got ${keys.length}`
  const kind = keys[0] as string
  const value = item[kind]
  switch (kind) {
    case 'say':
    case 'think':
    case 'bash':
    case 'answer':
    case 'fail':
    case 'recall':
      return typeof value === 'string' ? null : `"${kind}" takes a string`
    case 'sleep':
      return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? null : '"sleep" takes a number of milliseconds ≥ 0'
    case 'structured':
      return isObject(value) ? null : '"structured" takes a JSON object'
    case 'write':
      return isObject(value) && typeof value.path === 'string' && value.path !== '' && typeof value.content === 'string'
        ? null
        : '"write" takes {"path": string, "content": string}'
    case 'artifact':
      return artifactProblem(value)
    case 'usage':
      return usageProblem(value)
    case 'mcp':
      return isObject(value) &&
        typeof value.server === 'string' &&
        typeof value.tool === 'string' &&
        (value.input === undefined || isObject(value.input))
        ? null
        : '"mcp" takes {"server": string, "tool": string, "input"?: object}'
    default:
      return `unknown step "${kind}"`
  }
}

function artifactProblem(value: unknown): string | null {
  const shape = '"artifact" takes {"name": string, "content": string, "content_type"?: string}'
  if (!isObject(value) || typeof value.name !== 'string' || typeof value.content !== 'string') return shape
  if (value.content_type !== undefined && typeof value.content_type !== 'string') return shape
  // The name becomes a path under the artifacts directory; it must not climb out of it.
  const segments = value.name.split('/')
  if (value.name.startsWith('/') || segments.some((s) => s === '' || s === '.' || s === '..')) {
    return `artifact name "${value.name}" must be a relative path inside the artifacts directory`
  }
  return null
}

function usageProblem(value: unknown): string | null {
  const count = (v: unknown) => typeof v === 'number' && Number.isInteger(v) && v >= 0
  if (!isObject(value) || !count(value.input) || !count(value.output)) {
    return '"usage" takes {"input": int, "output": int, "cache_read"?: int, "cache_write"?: int}'
  }
  for (const key of ['cache_read', 'cache_write']) {
    if (value[key] !== undefined && !count(value[key])) return `"usage.${key}" must be an integer ≥ 0`
  }
  return null
}

/**
 * The name a CLI offers a tool server's tool under, among the tools of its request: Claude Code
 * and Codex say `mcp__<server>__<tool>`, others `<server>__<tool>` or the bare tool name. Null
 * when none is offered (the reply then says so in text).
 */
export function mcpToolName(offered: readonly string[], server: string, tool: string): string | null {
  const exact = [`mcp__${server}__${tool}`, `${server}__${tool}`, `mcp_${server}_${tool}`].find((name) => offered.includes(name))
  return exact ?? offered.find((name) => name.endsWith(`__${tool}`) && name.includes(server)) ?? (offered.includes(tool) ? tool : null)
}
