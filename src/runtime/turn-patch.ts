import type { TokenUsage, TurnOutcome } from '../harness/harness'
import type { Catalog } from '../catalog/catalog'
import { compileOutputSchema } from '../catalog/output-schema'
import type { SessionPatch, SessionRow } from '../session-record/store'

/**
 * The session fields a finished turn sets: answer, tokens and cost added to the session's totals,
 * counts, capture state. A stopped turn ends with no answer.
 */
export function turnPatch(
  catalog: Catalog,
  row: SessionRow,
  turn: number,
  outcome: TurnOutcome,
  /** `costUsd` when the gateway metered the turn at the price of each model it called. */
  usage: (TokenUsage & { costUsd?: number }) | null,
  lastText: string | null,
  stopped: boolean,
  now: number,
): SessionPatch {
  let schemaValid: boolean | null = null
  if (row.outputSchema && !stopped) schemaValid = outcome.structured !== null && conforms(row.outputSchema, outcome.structured)
  const add = (a: number | null, b: number | undefined) => (b === undefined ? a : (a ?? 0) + b)
  const input = add(row.inputTokens, usage?.input)
  const output = add(row.outputTokens, usage?.output)
  const cacheWrite = add(row.cacheWriteTokens, usage?.cacheWrite)
  // Counts only the CLI reported (no gateway meter) can only be priced at the session's model.
  const model = catalog.models.find((m) => m.id === row.model)
  const turnCost =
    usage?.costUsd !== undefined
      ? usage.costUsd
      : usage && model
        ? ((usage.input + usage.cacheWrite) * model.pricing.input_per_million + usage.output * model.pricing.output_per_million) / 1e6
        : null
  const answered = !stopped && (outcome.error === null || outcome.answerText !== null)
  return {
    turnsCount: turn,
    inputTokens: input,
    outputTokens: output,
    cacheReadTokens: add(row.cacheReadTokens, usage?.cacheRead),
    cacheWriteTokens: cacheWrite,
    reasoningTokens: add(row.reasoningTokens, usage?.reasoning),
    totalTokens: usage ? (input ?? 0) + (cacheWrite ?? 0) + (output ?? 0) : row.totalTokens,
    totalCostUsd: turnCost === null ? row.totalCostUsd : (row.totalCostUsd ?? 0) + turnCost,
    toolCallsCount: (row.toolCallsCount ?? 0) + outcome.toolCalls,
    toolErrorsCount: (row.toolErrorsCount ?? 0) + outcome.toolErrors,
    sessionCapture: stopped && outcome.capture !== 'complete' ? 'partial' : outcome.capture,
    harnessSessionId: outcome.resumeId ?? row.harnessSessionId,
    harnessVersionResolved: outcome.harnessVersion ?? row.harnessVersionResolved,
    effectiveConfig: { ...(row.effectiveConfig ?? {}), harness_version: outcome.harnessVersion ?? row.harnessVersionResolved },
    summary: lastText ? lastLine(lastText) : row.summary,
    hasResult: answered,
    resultText: answered ? outcome.answerText : null,
    resultStructured: answered ? outcome.structured : null,
    schemaValid,
    completedAt: now,
  }
}

function lastLine(text: string): string {
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean)
  return (lines.at(-1) ?? '').slice(0, 200)
}

/**
 * A schema stored before patterns ran on the linear-time engine may hold one it refuses
 * (lookaround); the answer then cannot be shown to conform, and the turn still ends.
 */
function conforms(schema: Record<string, unknown>, value: Record<string, unknown>): boolean {
  try {
    return compileOutputSchema(schema)(value) === true
  } catch {
    return false
  }
}
