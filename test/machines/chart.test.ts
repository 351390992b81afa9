import { describe, expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { initialTransition, transition } from 'xstate'
import { chartStates, chartTransitions, lifecycleDoc, mermaidChart, transitionTaken } from '../../machines/chart'
import { sessionMachine } from '../../machines/session.machine'
import { SESSION_STATUSES } from '../../src/domain/status'

const committed = join(import.meta.dir, '..', '..', 'docs', 'lifecycle.md')

describe('lifecycle chart', () => {
  test('docs/lifecycle.md equals a fresh generation (run `bun run chart` after changing the machine)', () => {
    expect(readFileSync(committed, 'utf8')).toBe(lifecycleDoc())
  })

  test('one chart state per machine state, every transition definition in the table', () => {
    expect(chartStates().map((s) => s.id)).toEqual([...SESSION_STATUSES])
    const rows = chartTransitions()
    expect(new Set(rows.map((r) => r.key)).size).toBe(rows.length)
    // Every own transition of every state appears exactly once, root ones once per state that falls back to them.
    for (const node of Object.values(sessionMachine.root.states)) {
      for (const definitions of node.transitions.values()) {
        for (const definition of definitions) expect(rows.filter((r) => r.definition === definition)).toHaveLength(1)
      }
    }
    for (const definitions of sessionMachine.root.transitions.values()) {
      for (const definition of definitions) expect(rows.filter((r) => r.definition === definition).length).toBeGreaterThan(0)
    }
  })

  test('the diagram names every state and draws each state-changing transition', () => {
    const chart = mermaidChart()
    expect(chart.startsWith('stateDiagram-v2\n')).toBe(true)
    for (const state of SESSION_STATUSES) expect(chart).toMatch(new RegExp(`\\b${state}\\b`))
    for (const row of chartTransitions().filter((r) => r.to !== null && !r.refusal)) {
      expect(chart).toContain(`${row.from} --> ${row.to} :`)
    }
    expect(mermaidChart(undefined, { highlight: 'paused' })).toContain('class paused current')
  })

  test('refusals carry their HTTP answer; the row a transition takes is found from the machine', () => {
    const [queued] = initialTransition(sessionMachine, { persistence: 'resumable', mode: 'headless', hasSchema: false })
    expect(transitionTaken(queued, { type: 'message', activeRuns: 0, limit: 4 })).toMatchObject({
      from: 'queued',
      event: 'message',
      refusal: { kind: 'conflict' },
    })
    expect(transitionTaken(queued, { type: 'admit', activeRuns: 0, limit: 4 })).toMatchObject({
      to: 'allocating',
      guard: 'withinConcurrency',
    })
    expect(transitionTaken(queued, { type: 'admit', activeRuns: 4, limit: 4 })).toBeNull()
    const [cancelled] = transition(sessionMachine, queued, { type: 'cancel' })
    expect(transitionTaken(cancelled, { type: 'message', activeRuns: 0, limit: 4 })).toMatchObject({
      inherited: true,
      refusal: { code: 'TASK_TERMINAL' },
    })
  })
})
