import { describe, expect, test } from 'bun:test'
import type { SessionEvent } from '../../src/domain/session-event'
import type { HarnessEvent } from '../../src/harness/harness'
import { indexToolCalls } from '../../src/transcript/tool-calls'
import { roleOf, splitTurns } from '../../src/transcript/service'

const ev = (type: SessionEvent['type'], fields: Partial<HarnessEvent> = {}): HarnessEvent => ({
  type,
  agent: 'harness_1',
  timestamp: '2026-01-01T00:00:00.000Z',
  ...fields,
})
const user = (content: string) => ev('message', { role: 'user', content })

describe('splitTurns', () => {
  test('a turn starts at each user message; the init before it opens the turn with it', () => {
    const events = [ev('init'), user('one'), ev('message', { role: 'assistant' }), ev('result'), ev('init'), user('two'), ev('result')]
    expect(splitTurns(events).map((turn) => turn.map((e) => e.content ?? e.type))).toEqual([
      ['init', 'one', 'message', 'result'],
      ['init', 'two', 'result'],
    ])
  })

  test('events before the first user message belong to the first turn; no user message is one turn', () => {
    expect(splitTurns([ev('init'), ev('error')])).toHaveLength(1)
    expect(splitTurns([])).toEqual([])
  })
})

test('roleOf: messages by role, thinking, both tool events as tools, everything else none', () => {
  expect(
    [
      user('x'),
      ev('message', { role: 'assistant' }),
      ev('thinking'),
      ev('tool_use'),
      ev('tool_result'),
      ev('usage'),
      ev('init'),
      ev('error'),
    ].map(roleOf),
  ).toEqual(['user', 'assistant', 'thinking', 'tools', 'tools', null, null, null])
})

describe('indexToolCalls', () => {
  const stored = (turn: number, event: HarnessEvent) => ({
    turn,
    kind: 'harness',
    type: event.type,
    data: event as Record<string, unknown>,
  })

  test('joins by callId within a turn; Codex reuses ids across turns', () => {
    const calls = indexToolCalls(
      [
        stored(1, ev('tool_use', { callId: 'item_0', tool: 'exec_command', command: "bash -lc 'ls | wc -l'", args: { command: 'x' } })),
        stored(1, ev('tool_result', { callId: 'item_0', success: true, exitCode: 0, timestamp: '2026-01-01T00:00:01.000Z' })),
        stored(2, ev('tool_use', { callId: 'item_0', tool: 'exec_command', command: 'make' })),
        stored(2, ev('tool_result', { callId: 'item_0', success: false, exitCode: 2 })),
        stored(2, ev('tool_use', { callId: 'item_1', tool: 'web_search', args: { query: 'q' } })),
        stored(2, ev('tool_result', { callId: 'item_1', success: false })),
        { turn: 2, kind: 'log', type: 'stderr', data: {} },
      ],
      null,
    )
    expect(calls).toEqual([
      {
        call_key: '1:item_0',
        ordinal: 0,
        tool: 'exec_command',
        program: 'ls',
        programs: ['ls', 'wc'],
        input: '{"command":"x"}',
        outcome: 'success',
        exit_code: 0,
        end_timestamp: '2026-01-01T00:00:01.000Z',
      },
      {
        call_key: '2:item_0',
        ordinal: 1,
        tool: 'exec_command',
        program: 'make',
        programs: ['make'],
        input: '{}',
        outcome: 'error',
        exit_code: 2,
        error_code: 'NON_ZERO_EXIT',
        end_timestamp: '2026-01-01T00:00:00.000Z',
      },
      {
        call_key: '2:item_1',
        ordinal: 2,
        tool: 'web_search',
        program: null,
        programs: [],
        input: '{"query":"q"}',
        outcome: 'error',
        error_code: 'TOOL_FAILED',
        end_timestamp: '2026-01-01T00:00:00.000Z',
      },
    ])
  })

  test('a call without a result is cancelled once its turn is over, and has no outcome while it runs', () => {
    const events = [
      stored(1, ev('tool_use', { callId: 'a', tool: 'Bash', command: 'sleep 100' })),
      stored(2, ev('tool_use', { callId: 'b', tool: 'Bash', command: 'sleep 1' })),
    ]
    const [ended, running] = indexToolCalls(events, 2)
    expect(ended).toMatchObject({ outcome: 'cancelled', error_code: 'NO_RESULT' })
    expect(running!.outcome).toBeUndefined()
  })
})
