import { describe, expect, test } from 'bun:test'
import { initialTransition, transition } from 'xstate'
import { sessionMachine, statusOf, type SessionInput, type SessionMachineEvent, type SessionSnapshot } from '../../machines/session.machine'
import { SESSION_STATUSES } from '../../src/domain/status'

const input: SessionInput = { persistence: 'resumable', mode: 'headless', hasSchema: false }

function run(events: SessionMachineEvent[], init: Partial<SessionInput> = {}) {
  let [snapshot, actions] = initialTransition(sessionMachine, { ...input, ...init })
  const all = actions.map((a) => a.type)
  for (const event of events) {
    ;[snapshot, actions] = transition(sessionMachine, snapshot, event)
    all.push(...actions.map((a) => a.type))
  }
  return { snapshot, actions: all, last: actions }
}

const toRunning: SessionMachineEvent[] = [{ type: 'admit', activeRuns: 0, limit: 4 }, { type: 'sandbox.ready' }]
const ended = (error: string | null = null, schemaValid: boolean | null = null): SessionMachineEvent => ({ type: 'turn.ended', error, schemaValid })

describe('session machine', () => {
  test('has one state per SessionStatus', () => {
    expect(Object.keys(sessionMachine.states).sort()).toEqual([...SESSION_STATUSES].sort())
  })

  test('create → queued → allocating → running → completed, with the named effects', () => {
    const { snapshot, actions } = run([...toRunning, ended()])
    expect(statusOf(snapshot)).toBe('completed')
    expect(actions).toEqual(['provisionSandbox', 'startTurn', 'releaseSandbox', 'admitQueued'])
    expect(snapshot.context.machineState).toBe('paused')
  })

  test('admission waits while the org is at its concurrent-run limit', () => {
    const { snapshot } = run([{ type: 'admit', activeRuns: 2, limit: 2 }])
    expect(statusOf(snapshot)).toBe('queued')
    expect(statusOf(run([{ type: 'admit', activeRuns: 5, limit: null }]).snapshot)).toBe('allocating')
  })

  test('an ephemeral sandbox is destroyed when the turn ends, a resumable one is kept', () => {
    const ephemeral = run([...toRunning, ended()], { persistence: 'ephemeral' })
    expect(ephemeral.last.find((a) => a.type === 'releaseSandbox')?.params).toEqual({ keep: false })
    expect(ephemeral.snapshot.context.machineState).toBe('stopped')
    const resumable = run([...toRunning, ended()])
    expect(resumable.last.find((a) => a.type === 'releaseSandbox')?.params).toEqual({ keep: true })
  })

  test('a turn error fails the session and records the error', () => {
    const { snapshot } = run([...toRunning, ended('API Error: 400 boom')])
    expect(statusOf(snapshot)).toBe('failed')
    expect(snapshot.context.error).toBe('API Error: 400 boom')
  })

  test('an output_schema run without a conforming answer needs review', () => {
    expect(statusOf(run([...toRunning, ended(null, false)], { hasSchema: true }).snapshot)).toBe('needs_review')
    expect(statusOf(run([...toRunning, ended(null, true)], { hasSchema: true }).snapshot)).toBe('completed')
    // Without a schema, schema validity plays no part.
    expect(statusOf(run([...toRunning, ended(null, null)]).snapshot)).toBe('completed')
  })

  test('an interactive turn that ends normally waits for input', () => {
    expect(statusOf(run([...toRunning, ended()], { mode: 'interactive' }).snapshot)).toBe('input_required')
  })

  test('sandbox failure fails the session', () => {
    const { snapshot } = run([{ type: 'admit', activeRuns: 0, limit: 1 }, { type: 'sandbox.failed', error: 'no space' }])
    expect(statusOf(snapshot)).toBe('failed')
    expect(snapshot.context.error).toBe('no space')
  })

  test('cancel is accepted while live and refused once finished', () => {
    for (const events of [[], [toRunning[0]!], toRunning]) {
      const { snapshot } = run(events)
      expect(snapshot.can({ type: 'cancel' })).toBe(true)
      const [next, actions] = transition(sessionMachine, snapshot, { type: 'cancel' })
      expect(statusOf(next)).toBe('cancelled')
      expect(next.status).toBe('done')
      if (statusOf(snapshot) === 'running') expect(actions.map((a) => a.type)).toContain('killTurn')
    }
    for (const end of [ended(), ended('x')]) expect(run([...toRunning, end]).snapshot.can({ type: 'cancel' })).toBe(false)
  })

  test('a restart ends a turn in flight as failed but leaves queued sessions waiting', () => {
    const running = run([...toRunning, { type: 'service.restarted' }]).snapshot
    expect(statusOf(running)).toBe('failed')
    expect(running.context.error).toContain('restarted')
    expect(statusOf(run([{ type: 'service.restarted' }]).snapshot)).toBe('queued')
  })

  test('a persisted snapshot round-trips through JSON', () => {
    const { snapshot } = run(toRunning)
    const restored = sessionMachine.resolveState(JSON.parse(JSON.stringify(sessionMachine.getPersistedSnapshot(snapshot))))
    expect(restored.value).toBe('running')
    const [next] = transition(sessionMachine, restored as SessionSnapshot, ended())
    expect(statusOf(next)).toBe('completed')
  })
})
