import { describe, expect, test } from 'bun:test'
import { initialTransition, transition } from 'xstate'
import {
  QUEUE_LIMIT,
  refusalOf,
  sessionMachine,
  statusOf,
  type SessionInput,
  type SessionMachineEvent,
  type SessionSnapshot,
} from '../../machines/session.machine'
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
const ended = (error: string | null = null, schemaValid: boolean | null = null, stopped = false): SessionMachineEvent => ({
  type: 'turn.ended',
  error,
  schemaValid,
  stopped,
})
const slot = { activeRuns: 0, limit: 4 }
const full = { activeRuns: 4, limit: 4 }
const message = (slots = slot): SessionMachineEvent => ({ type: 'message', ...slots })

/** The refusal a command gets in a snapshot, or null when it is accepted. */
function refusal(snapshot: SessionSnapshot, event: SessionMachineEvent) {
  return refusalOf(transition(sessionMachine, snapshot, event)[1])
}

describe('session machine', () => {
  test('has one state per SessionStatus', () => {
    expect(Object.keys(sessionMachine.states).sort()).toEqual([...SESSION_STATUSES].sort())
  })

  test('create → queued → allocating → running → completed, with the named effects', () => {
    const { snapshot, actions } = run([...toRunning, ended()])
    expect(statusOf(snapshot)).toBe('completed')
    expect(actions).toEqual(['provisionSandbox', 'startTurn', 'releaseSandbox', 'admitQueued'])
    expect(snapshot.context).toMatchObject({ hasSandbox: true, turnActive: false, restStatus: 'completed' })
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
    const { snapshot } = run([
      { type: 'admit', activeRuns: 0, limit: 1 },
      { type: 'sandbox.failed', error: 'no space' },
    ])
    expect(statusOf(snapshot)).toBe('failed')
    expect(snapshot.context.error).toBe('no space')
  })

  test('cancel is accepted while live and refused once finished', () => {
    for (const events of [[], [toRunning[0]!], toRunning, [...toRunning, { type: 'pause' } as const]]) {
      const { snapshot } = run(events)
      const [next, actions] = transition(sessionMachine, snapshot, { type: 'cancel' })
      expect(refusalOf(actions)).toBeNull()
      expect(statusOf(next)).toBe('cancelled')
      expect(next.status).toBe('done')
      expect(actions.map((a) => a.type)).toContain('destroySandbox')
    }
    for (const end of [ended(), ended('x')]) {
      const { snapshot } = run([...toRunning, end])
      expect(refusal(snapshot, { type: 'cancel' })).toMatchObject({ kind: 'conflict' })
      const cancelled = transition(sessionMachine, snapshot, { type: 'cancel' })[0]
      expect(statusOf(cancelled)).toBe(statusOf(snapshot))
    }
  })

  test('a restart ends a turn in flight as failed but leaves queued sessions waiting', () => {
    const running = run([...toRunning, { type: 'service.restarted' }]).snapshot
    expect(statusOf(running)).toBe('failed')
    expect(running.context.error).toContain('restarted')
    // The sandbox's disk survived: the session takes follow-ups.
    expect(refusal(running, message())).toBeNull()
    const ephemeral = run([...toRunning, { type: 'service.restarted' }], { persistence: 'ephemeral' }).snapshot
    expect(statusOf(ephemeral)).toBe('failed')
    expect(refusal(ephemeral, message())).toMatchObject({ code: 'TASK_TERMINAL' })
    expect(statusOf(run([{ type: 'service.restarted' }]).snapshot)).toBe('queued')
  })

  test('a restart delivers what was queued behind the lost turn', () => {
    let { snapshot } = run(toRunning)
    ;[snapshot] = transition(sessionMachine, snapshot, message())
    const [next, actions] = transition(sessionMachine, snapshot, { type: 'service.restarted' })
    expect(statusOf(next)).toBe('running')
    expect(actions.map((a) => a.type)).toEqual(['dequeueMessage', 'startTurn'])
  })

  test('a persisted snapshot round-trips through JSON', () => {
    const { snapshot } = run(toRunning)
    const restored = sessionMachine.resolveState(JSON.parse(JSON.stringify(sessionMachine.getPersistedSnapshot(snapshot))))
    expect(restored.value).toBe('running')
    const [next] = transition(sessionMachine, restored as SessionSnapshot, ended())
    expect(statusOf(next)).toBe('completed')
  })

  describe('follow-ups', () => {
    test('while a turn runs they queue, up to 20; the 21st is QUEUE_FULL', () => {
      let { snapshot } = run(toRunning)
      for (let i = 1; i <= QUEUE_LIMIT; i++) {
        const [next, actions] = transition(sessionMachine, snapshot, message())
        expect(actions.map((a) => a.type)).toEqual(['enqueueMessage'])
        expect(next.context.queued).toBe(i)
        snapshot = next
      }
      expect(refusal(snapshot, message())).toEqual({ kind: 'rate_limited', code: 'QUEUE_FULL', message: expect.any(String) })
    })

    test('queued ones are delivered, in order, when the turn ends: the session keeps running', () => {
      let { snapshot } = run(toRunning)
      ;[snapshot] = transition(sessionMachine, snapshot, message())
      ;[snapshot] = transition(sessionMachine, snapshot, message())
      const [next, actions] = transition(sessionMachine, snapshot, ended())
      expect(statusOf(next)).toBe('running')
      expect(actions.map((a) => a.type)).toEqual(['dequeueMessage', 'startTurn'])
      expect(next.context.queued).toBe(1)
      const [last] = transition(sessionMachine, transition(sessionMachine, next, ended())[0], ended())
      expect(statusOf(last)).toBe('completed')
    })

    test('between turns a follow-up wakes the sandbox and starts a turn', () => {
      const { snapshot } = run([...toRunning, ended()])
      const [next, actions] = transition(sessionMachine, snapshot, message())
      expect(statusOf(next)).toBe('running')
      expect(actions.map((a) => a.type)).toEqual(['wakeSandbox', 'deliverMessage', 'startTurn'])
      // A failed or unproven turn takes follow-ups too.
      expect(refusal(run([...toRunning, ended('x')]).snapshot, message())).toBeNull()
      expect(refusal(run([...toRunning, ended(null, false)], { hasSchema: true }).snapshot, message())).toBeNull()
    })

    test('without a free slot the follow-up waits in queued, then goes straight to its sandbox', () => {
      const { snapshot } = run([...toRunning, ended()])
      const [waiting, actions] = transition(sessionMachine, snapshot, message(full))
      expect(statusOf(waiting)).toBe('queued')
      expect(actions.map((a) => a.type)).toEqual(['enqueueMessage'])
      expect(statusOf(transition(sessionMachine, waiting, { type: 'admit', ...full })[0])).toBe('queued')
      const [admitted, admitActions] = transition(sessionMachine, waiting, { type: 'admit', ...slot })
      expect(statusOf(admitted)).toBe('running')
      expect(admitActions.map((a) => a.type)).toEqual(['wakeSandbox', 'dequeueMessage', 'startTurn'])
    })

    test('refusals: closed (TASK_TERMINAL), not started (409), ephemeral mid-turn, no sandbox left', () => {
      expect(refusal(run([]).snapshot, message())).toEqual({ kind: 'conflict', message: expect.stringContaining('not started') })
      expect(refusal(run([toRunning[0]!]).snapshot, message())).toMatchObject({ kind: 'conflict' })
      expect(refusal(run([{ type: 'cancel' }]).snapshot, message())).toMatchObject({ kind: 'conflict', code: 'TASK_TERMINAL' })
      expect(refusal(run([...toRunning, ended()], { persistence: 'ephemeral' }).snapshot, message())).toMatchObject({
        code: 'TASK_TERMINAL',
      })
      expect(refusal(run(toRunning, { persistence: 'ephemeral' }).snapshot, message())).toMatchObject({
        kind: 'conflict',
        code: 'PERSISTENCE_MODE_CONFLICT',
      })
      const sandboxFailed = run([toRunning[0]!, { type: 'sandbox.failed', error: 'x' }]).snapshot
      expect(refusal(sandboxFailed, message())).toMatchObject({ kind: 'conflict', code: 'CONTINUATION_UNSUPPORTED' })
      const restarted = run([toRunning[0]!, { type: 'service.restarted' }]).snapshot
      expect(refusal(restarted, message())).toMatchObject({ code: 'CONTINUATION_UNSUPPORTED' })
    })
  })

  describe('pause and resume', () => {
    test('mid-turn: parked, then woken with the turn going on', () => {
      const [paused, actions] = transition(sessionMachine, run(toRunning).snapshot, { type: 'pause' })
      expect(statusOf(paused)).toBe('paused')
      expect(actions.map((a) => a.type)).toEqual(['parkSandbox', 'admitQueued'])
      expect(paused.context).toMatchObject({ machineState: 'pausing', turnActive: true })
      const [parked] = transition(sessionMachine, paused, { type: 'sandbox.parked' })
      expect(parked.context.machineState).toBe('paused')
      expect(refusal(parked, { type: 'resume', ...full })).toMatchObject({ kind: 'conflict', code: 'CONCURRENCY_LIMIT_REACHED' })
      const [resumed, resumeActions] = transition(sessionMachine, parked, { type: 'resume', ...slot })
      expect(statusOf(resumed)).toBe('running')
      expect(resumeActions.map((a) => a.type)).toEqual(['wakeSandbox'])
      expect(resumed.context.machineState).toBe('resuming')
      expect(transition(sessionMachine, resumed, { type: 'sandbox.woken' })[0].context.machineState).toBe('running')
    })

    test('between turns: paused, then back where the last turn ended', () => {
      for (const [end, status] of [
        [ended(), 'completed'],
        [ended('x'), 'failed'],
      ] as const) {
        const [paused] = transition(sessionMachine, run([...toRunning, end]).snapshot, { type: 'pause' })
        expect(statusOf(paused)).toBe('paused')
        expect(statusOf(transition(sessionMachine, paused, { type: 'resume', ...full })[0])).toBe(status)
      }
    })

    test('a follow-up to a paused session wakes it', () => {
      const [pausedBetween] = transition(sessionMachine, run([...toRunning, ended()]).snapshot, { type: 'pause' })
      const [a, aActions] = transition(sessionMachine, pausedBetween, message())
      expect(statusOf(a)).toBe('running')
      expect(aActions.map((x) => x.type)).toContain('deliverMessage')
      const [pausedMid] = transition(sessionMachine, run(toRunning).snapshot, { type: 'pause' })
      const [b, bActions] = transition(sessionMachine, pausedMid, message())
      expect(statusOf(b)).toBe('running')
      expect(bActions.map((x) => x.type)).toEqual(['wakeSandbox', 'enqueueMessage'])
    })

    test('refusals: ephemeral, nothing to pause, not paused, already paused', () => {
      expect(refusal(run(toRunning, { persistence: 'ephemeral' }).snapshot, { type: 'pause' })).toMatchObject({ kind: 'conflict' })
      expect(refusal(run([]).snapshot, { type: 'pause' })).toMatchObject({ kind: 'conflict' })
      expect(refusal(run(toRunning).snapshot, { type: 'resume', ...slot })).toMatchObject({ kind: 'conflict' })
      const [paused] = transition(sessionMachine, run(toRunning).snapshot, { type: 'pause' })
      expect(refusal(paused, { type: 'pause' })).toMatchObject({ kind: 'conflict' })
    })

    test('a parked session past the idle limit expires; its sandbox is destroyed', () => {
      const [expired, actions] = transition(sessionMachine, run([...toRunning, ended()]).snapshot, { type: 'idle.timeout' })
      expect(statusOf(expired)).toBe('expired')
      expect(actions.map((a) => a.type)).toContain('destroySandbox')
      expect(refusal(expired, message())).toMatchObject({ code: 'TASK_TERMINAL' })
    })
  })

  describe('stop_turn', () => {
    test('interrupts a running turn; the turn then ends with no answer and the session stays open', () => {
      const { snapshot } = run(toRunning)
      const [same, actions] = transition(sessionMachine, snapshot, { type: 'stop_turn' })
      expect(statusOf(same)).toBe('running')
      expect(actions.map((a) => a.type)).toEqual(['stopTurn'])
      const [after] = transition(sessionMachine, same, ended('killed', null, true))
      expect(statusOf(after)).toBe('completed')
      expect(refusal(after, message())).toBeNull()
    })

    test('NO_ACTIVE_TURN when no turn runs', () => {
      for (const events of [[], [...toRunning, ended()]]) {
        expect(refusal(run(events).snapshot, { type: 'stop_turn' })).toMatchObject({ kind: 'conflict', code: 'NO_ACTIVE_TURN' })
      }
    })
  })

  describe('fork', () => {
    const fork: SessionMachineEvent = { type: 'fork', into: 'f-1' }
    test('a resumable session parked between turns is copied: one forkSandbox into the fork, nothing of it changes', () => {
      for (const events of [
        [...toRunning, ended()],
        [...toRunning, ended('boom')],
        [...toRunning, ended(), { type: 'pause' }],
      ] as SessionMachineEvent[][]) {
        const before = run(events).snapshot
        const [after, actions] = transition(sessionMachine, before, fork)
        expect(actions.map((a) => [a.type, a.params])).toEqual([['forkSandbox', { into: 'f-1' }]])
        expect(after.value).toEqual(before.value)
        expect(after.context).toEqual(before.context)
      }
      expect(refusal(run([...toRunning, ended()], { mode: 'interactive' }).snapshot, fork)).toBeNull()
    })

    test('NOT_FORKABLE: queued, starting, mid-turn, paused mid-turn, ephemeral, without a sandbox, closed', () => {
      const cases: [SessionMachineEvent[], Partial<SessionInput>, string][] = [
        [[], {}, 'runs one'],
        [[toRunning[0]!], {}, 'runs one'],
        [toRunning, {}, 'runs one'],
        [[...toRunning, { type: 'pause' }], {}, 'paused mid-turn'],
        [[...toRunning, ended()], { persistence: 'ephemeral' }, 'ephemeral'],
        [[toRunning[0]!, { type: 'sandbox.failed', error: 'x' }], {}, 'its sandbox is gone'],
        [[{ type: 'cancel' }], {}, 'closed'],
        [[...toRunning, ended(), { type: 'idle.timeout' }], {}, 'closed'],
      ]
      for (const [events, init, why] of cases) {
        expect(refusal(run(events, init).snapshot, fork)).toEqual({
          kind: 'conflict',
          code: 'NOT_FORKABLE',
          message: expect.stringContaining(why),
        })
      }
    })
  })
})
