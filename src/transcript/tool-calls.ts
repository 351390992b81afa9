/**
 * The tool-call index (spec 2.9, 4.3 GET …/tool-calls): every `tool_use` of a session's transcript
 * joined with its `tool_result` by `callId`, in call order, with the programs of shell calls.
 */
import { statusIn } from '../domain/status'
import { isObject } from '../domain/values'
import type { OrgAccess } from '../identity/service'
import type { SessionLookup } from '../session-record/ports'
import type { SessionStore } from '../session-record/store'
import { shellPrograms } from './shell-programs'
import type { ToolCall, ToolCallsQuery } from './model'

export class ToolCallService {
  constructor(
    private readonly queries: SessionLookup,
    private readonly store: SessionStore,
  ) {}

  list(access: OrgAccess, projectRef: string, id: string, query: ToolCallsQuery): { tool_calls: ToolCall[] } {
    const row = this.queries.find(access, projectRef, id)
    const calls = indexToolCalls(this.store.allEvents(row.id), statusIn('active', row.status) ? row.turnsCount + 1 : null)
    const kept = calls.filter(
      (c) =>
        (query.tool === undefined || c.tool === query.tool) &&
        (query.program === undefined || c.programs.includes(query.program)) &&
        (query.outcome === undefined || c.outcome === query.outcome),
    )
    return { tool_calls: kept.slice(0, query.limit ?? 100) }
  }
}

interface StoredEvent {
  turn: number
  kind: string
  type: string
  data: Record<string, unknown>
}

/**
 * Joins calls and results. A call without a result is `cancelled` once its turn is over (the
 * turn was stopped or the CLI died mid-call); in the running turn it has no outcome yet.
 */
export function indexToolCalls(events: readonly StoredEvent[], runningTurn: number | null): ToolCall[] {
  const calls: ToolCall[] = []
  const open = new Map<string, ToolCall>()
  for (const event of events) {
    if (event.kind !== 'harness') continue
    const data = event.data
    const callId = typeof data.callId === 'string' ? data.callId : null
    if (event.type === 'tool_use') {
      const command = typeof data.command === 'string' ? data.command : null
      const programs = command === null ? [] : shellPrograms(command)
      // CLIs number their calls per run (Codex's item_0, item_1…), so the turn makes keys unique.
      const call: ToolCall = {
        call_key: `${event.turn}:${callId ?? `call-${calls.length}`}`,
        ordinal: calls.length,
        tool: typeof data.tool === 'string' ? data.tool : 'unknown',
        program: programs[0] ?? null,
        programs,
        input: JSON.stringify(isObject(data.args) ? data.args : {}),
      }
      if (event.turn !== runningTurn) Object.assign(call, { outcome: 'cancelled', error_code: 'NO_RESULT' })
      calls.push(call)
      if (callId) open.set(`${event.turn}:${callId}`, call)
    } else if (event.type === 'tool_result' && callId) {
      const call = open.get(`${event.turn}:${callId}`)
      if (!call) continue
      open.delete(`${event.turn}:${callId}`)
      delete call.error_code
      const exitCode = typeof data.exitCode === 'number' ? data.exitCode : undefined
      call.outcome = data.success === false ? 'error' : 'success'
      if (exitCode !== undefined) call.exit_code = exitCode
      if (call.outcome === 'error') call.error_code = exitCode !== undefined && exitCode !== 0 ? 'NON_ZERO_EXIT' : 'TOOL_FAILED'
      if (typeof data.timestamp === 'string') call.end_timestamp = data.timestamp
    }
  }
  return calls
}
