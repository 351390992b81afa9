import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'
import { poll } from '../helpers/poll'
import { openSse } from '../helpers/sse'

let t: TestApp
let base: string
beforeAll(async () => {
  t = await makeTestApp({}, { sseKeepaliveMs: 100 })
  t.plans.setPlan('acme', { maxConcurrent: 50 })
  base = t.listen()
})
afterAll(() => t[Symbol.asyncDispose]())

const path = (id: string, rest = '') => `/o/acme/p/_/sessions/${id}${rest}`
const call = (method: string, url: string, body?: unknown) => t.app.handle(req(method, url, { token: t.admin.token, body }))
const get = async (id: string) => json(await call('GET', path(id)))
/**
 * Codex by default: what is tested here (streams, follow-ups, pause, stop) is the same for every
 * harness, and Codex starts a turn in a fraction of the Node CLIs' time.
 */
async function start(prompt: string, extra: Record<string, unknown> = {}) {
  const res = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt, ...extra })
  expect(res.status).toBe(202)
  return (await json(res)).execution_id as string
}
const settle = (id: string, statuses = ['completed', 'needs_review', 'failed', 'input_required', 'cancelled']) =>
  waitFor(
    () => get(id),
    (s) => statuses.includes(s.status),
  )
const running = (id: string) =>
  waitFor(
    () => get(id),
    (s) => s.status === 'running',
  )
/** Waits until the CLI has started its turn (its init event is stored). */
const inTurn = (id: string, turn = 1) =>
  waitFor(
    async () => t.store.allEvents(id).filter((e) => e.type === 'init').length,
    (n) => n >= turn,
  )
const stream = (id: string, headers: Record<string, string> = {}, query = '') =>
  openSse(`${base}${path(id, '/events')}${query}`, t.admin.token, headers)

describe('GET …/events (server-sent events)', () => {
  test('status events, then every harness event with an id, then done with the result', async () => {
    const id = await start(script([{ say: 'Looking' }, { bash: 'echo hi' }, { answer: 'ok' }]))
    const sse = await stream(id)
    expect(sse.status).toBe(200)
    const frames = await sse.frames()
    const ids = frames.filter((f) => f.id !== undefined).map((f) => f.id!)
    expect(ids).toEqual([...ids].sort((a, b) => a - b))
    expect(new Set(ids).size).toBe(ids.length)
    expect(frames[0]).toMatchObject({ event: 'status', data: { status: 'queued', id } })
    expect(frames.filter((f) => f.event === 'status').map((f) => f.data.status)).toEqual(['queued', 'allocating', 'running', 'completed'])
    const harness = frames.filter((f) => f.event === 'message').map((f) => f.data.type)
    expect(harness).toEqual(expect.arrayContaining(['init', 'message', 'tool_use', 'tool_result', 'result']))
    const done = frames.at(-1)!
    expect(done.event).toBe('done')
    expect(done.data).toEqual({
      status: 'completed',
      output: 'completed in 1 turn',
      result: { text: 'ok', structured: null, schema_valid: null },
    })
  })

  test('a reconnect with Last-Event-ID or ?cursor gets exactly the events after it', async () => {
    const id = await start(script([{ say: 'one' }, { bash: 'true' }, { say: 'two' }, { answer: 'three' }]))
    const all = await (await stream(id)).frames()
    const withIds = all.filter((f) => f.id !== undefined)
    const k = withIds[4]!.id!
    for (const resume of [await stream(id, { 'last-event-id': String(k) }), await stream(id, {}, `?cursor=${k}`)]) {
      const rest = await resume.frames()
      expect(rest.filter((f) => f.id !== undefined).map((f) => f.id)).toEqual(withIds.slice(5).map((f) => f.id))
      expect(rest.at(-1)!.event).toBe('done')
    }
  })

  test('a client that disconnects after event k and reconnects mid-run misses nothing and sees nothing twice', async () => {
    const id = await start(script([{ say: 'a' }, { sleep: 600 }, { say: 'b' }, { bash: 'true' }, { answer: 'c' }]))
    const first = await stream(id)
    const head = await first.frames(4)
    first.close()
    const last = head.at(-1)!.id!
    const tail = await (await stream(id, { 'last-event-id': String(last) })).frames()
    const seen = [...head, ...tail].filter((f) => f.id !== undefined).map((f) => f.id!)
    const stored = t.store
      .allEvents(id)
      .filter((e) => e.kind !== 'log')
      .map((e) => e.seq)
    expect(seen).toEqual(stored)
    expect(tail.at(-1)!.event).toBe('done')
  })

  test('100 concurrent subscribers all receive the same ordered ids', async () => {
    const id = await start(script([{ sleep: 500 }, { say: 'x' }, { bash: 'true' }, { answer: 'y' }]))
    const readers = await Promise.all(Array.from({ length: 100 }, () => stream(id)))
    const results = await Promise.all(readers.map((r) => r.frames()))
    const expected = results[0]!.map((f) => f.id)
    expect(expected.length).toBeGreaterThan(6)
    for (const frames of results) expect(frames.map((f) => f.id)).toEqual(expected)
  })

  test('a subscriber that never reads does not hold the run back', async () => {
    const id = await start(script([{ say: 'x'.repeat(2000) }, { bash: 'seq 1 2000' }, { answer: 'done' }]))
    const stalled = await fetch(`${base}${path(id, '/events')}`, { headers: { authorization: `Bearer ${t.admin.token}` } })
    expect(stalled.status).toBe(200)
    expect((await settle(id)).status).toBe('completed')
    await stalled.body?.cancel()
  })

  test('a finished session replays and ends with done; idle streams get keepalive comments', async () => {
    const id = await start(script([{ sleep: 400 }, { answer: 'fine' }]))
    const live = await stream(id)
    const frames = await live.frames()
    expect(live.comments).toContain('keepalive')
    expect(frames.at(-1)!.event).toBe('done')
    const replay = await (await stream(id)).frames()
    expect(replay.map((f) => f.id)).toEqual(frames.map((f) => f.id))
  })

  test('404 for an unknown session, 400 for a malformed cursor, 401 without a token', async () => {
    expect((await stream('00000000-0000-0000-0000-000000000000')).status).toBe(404)
    const id = await start('hello')
    expect((await stream(id, { 'last-event-id': 'abc' })).status).toBe(400)
    expect((await fetch(`${base}${path(id, '/events')}`)).status).toBe(401)
  })
})

describe('POST …/messages (follow-ups)', () => {
  test('delivered at once between turns (200), resuming the CLI’s own conversation', async () => {
    const id = await start(script([{ bash: 'echo one > one.txt' }, { answer: 'first' }]))
    await settle(id)
    const res = await call('POST', path(id, '/messages'), { content: script([{ bash: 'cat one.txt > two.txt' }, { answer: 'second' }]) })
    expect(res.status).toBe(200)
    expect(await json(res)).toEqual({ ok: true, status: 'message_sent' })
    const done = await waitFor(
      () => get(id),
      (s) => s.turns_count === 2 && s.status === 'completed',
    )
    expect(done.machine_state).toBe('paused')
    expect(done.sandbox_generation).toBe(1)
    const result = await json(await call('GET', path(id, '/result')))
    expect(result).toMatchObject({ output: 'completed in 2 turns', result: { text: 'second' } })
    expect(await Bun.file(join(t.dir, 'sandboxes', id, 'workspace', 'two.txt')).text()).toBe('one\n')
    const init = t.store.allEvents(id).filter((e) => e.type === 'init')
    expect(init).toHaveLength(2)
  })

  test('1 delivered, then queued positions 1..20 while it runs; the 21st is 429; they run in order', async () => {
    const id = await start('first')
    await settle(id)
    const sent = await call('POST', path(id, '/messages'), { content: script([{ sleep: 1500 }, { answer: 'slow' }]) })
    expect(sent.status).toBe(200)
    await running(id)
    for (let i = 1; i <= 20; i++) {
      const res = await call('POST', path(id, '/messages'), { content: `follow-up ${i}` })
      expect(res.status).toBe(202)
      const body = await json(res)
      expect(body).toMatchObject({ ok: true, status: 'queued', position: i })
      expect(body.message_id).toMatch(/^[0-9a-f-]{36}$/)
    }
    const full = await call('POST', path(id, '/messages'), { content: 'one too many' })
    expect(full.status).toBe(429)
    expect(await json(full)).toMatchObject({ code: 'QUEUE_FULL' })
    const done = await waitFor(
      () => get(id),
      (s) => s.status === 'completed' && s.turns_count === 22,
      60_000,
    )
    expect(done.summary).toBe('Done: follow-up 20')
    const prompts = t.store
      .allEvents(id)
      .filter((e) => e.type === 'message' && e.data.role === 'user')
      .map((e) => e.data.content)
    expect(prompts.slice(2)).toEqual(Array.from({ length: 20 }, (_, i) => `follow-up ${i + 1}`))
  }, 90_000)

  test('400 for missing or empty content and CONTENT_TOO_LARGE over 256 KiB', async () => {
    const id = await start('hello')
    await settle(id)
    expect((await call('POST', path(id, '/messages'), {})).status).toBe(400)
    expect((await call('POST', path(id, '/messages'), { content: '' })).status).toBe(400)
    const big = await call('POST', path(id, '/messages'), { content: 'x'.repeat(256 * 1024 + 1) })
    expect(big.status).toBe(400)
    expect(await json(big)).toMatchObject({ code: 'CONTENT_TOO_LARGE' })
  })

  test('409 TASK_TERMINAL for a cancelled session and a finished ephemeral one', async () => {
    const cancelled = await start(script([{ sleep: 5000 }]))
    await running(cancelled)
    await call('PATCH', path(cancelled), { status: 'cancelled' })
    const a = await call('POST', path(cancelled, '/messages'), { content: 'hi' })
    expect(a.status).toBe(409)
    expect(await json(a)).toMatchObject({ code: 'TASK_TERMINAL' })
    const ephemeral = await start('hello', { persistence: 'ephemeral' })
    await settle(ephemeral)
    expect(await json(await call('POST', path(ephemeral, '/messages'), { content: 'hi' }))).toMatchObject({ code: 'TASK_TERMINAL' })
  })

  test('409 PERSISTENCE_MODE_CONFLICT for an ephemeral session with a turn running', async () => {
    const id = await start(script([{ sleep: 3000 }]), { persistence: 'ephemeral' })
    await running(id)
    const res = await call('POST', path(id, '/messages'), { content: 'hi' })
    expect(res.status).toBe(409)
    expect(await json(res)).toMatchObject({ code: 'PERSISTENCE_MODE_CONFLICT' })
    await call('PATCH', path(id), { status: 'cancelled' })
  })

  test('409 CONTINUATION_UNSUPPORTED when the sandbox is gone; 409 while not started yet', async () => {
    const id = await start('hello')
    await settle(id)
    // The session's sandbox disappears (as after a failed start): nothing can continue the run.
    t.actor.apply(id, { type: 'idle.timeout' })
    expect((await get(id)).status).toBe('expired')
    expect(await json(await call('POST', path(id, '/messages'), { content: 'hi' }))).toMatchObject({ code: 'TASK_TERMINAL' })

    await using small = await makeTestApp()
    small.plans.setPlan('acme', { maxConcurrent: 1 })
    const post = (url: string, body: unknown) => small.app.handle(req('POST', url, { token: small.admin.token, body }))
    const busy = (await json(await post('/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script([{ sleep: 5000 }]) }))).execution_id
    const waiting = (await json(await post('/o/acme/p/_/sessions', { agent: 'harness_1', prompt: 'later' }))).execution_id
    expect(small.store.get(waiting)!.status).toBe('queued')
    const res = await post(`/o/acme/p/_/sessions/${waiting}/messages`, { content: 'hi' })
    expect(res.status).toBe(409)
    expect(typeof (await json(res)).error).toBe('string')
    expect(busy).toBeTruthy()

    const failedStart = (await json(await post('/o/acme/p/_/sessions', { agent: 'harness_1', prompt: 'x' }))).execution_id
    small.actor.apply(failedStart, { type: 'admit', activeRuns: 0, limit: null })
    small.actor.apply(failedStart, { type: 'sandbox.failed', error: 'no disk' })
    const gone = await post(`/o/acme/p/_/sessions/${failedStart}/messages`, { content: 'hi' })
    expect(gone.status).toBe(409)
    expect(await json(gone)).toMatchObject({ code: 'CONTINUATION_UNSUPPORTED' })
  })
})

describe('PATCH pause, resume, stop_turn', () => {
  test('pause mid-turn of a {"sleep": 3000} script, resume, and the turn completes with its answer', async () => {
    const id = await start(script([{ sleep: 3000 }, { answer: 'after the nap' }]))
    await running(id)
    await inTurn(id)
    const paused = await call('PATCH', path(id), { status: 'paused' })
    expect(paused.status).toBe(202)
    expect((await json(paused)).operation_id).toBeString()
    const parked = await waitFor(
      () => get(id),
      (s) => s.machine_state === 'paused',
    )
    expect(parked.status).toBe('paused')
    await Bun.sleep(300)
    const resumed = await call('PATCH', path(id), { status: 'running' })
    expect(resumed.status).toBe(202)
    const done = await settle(id)
    expect(done.status).toBe('completed')
    expect(done.sandbox_generation).toBe(1)
    expect((await json(await call('GET', path(id, '/result')))).result.text).toBe('after the nap')
  })

  test('pause refusals: ephemeral (409), already paused (409); resume of a running session (409)', async () => {
    const ephemeral = await start(script([{ sleep: 3000 }]), { persistence: 'ephemeral' })
    await running(ephemeral)
    expect((await call('PATCH', path(ephemeral), { status: 'paused' })).status).toBe(409)
    expect((await call('PATCH', path(ephemeral), { status: 'running' })).status).toBe(409)
    await call('PATCH', path(ephemeral), { status: 'cancelled' })
    const id = await start(script([{ sleep: 3000 }]))
    await running(id)
    expect((await call('PATCH', path(id), { status: 'paused' })).status).toBe(202)
    expect((await call('PATCH', path(id), { status: 'paused' })).status).toBe(409)
    await call('PATCH', path(id), { status: 'cancelled' })
  })

  test('resume beyond the plan’s concurrent runs is 409 CONCURRENCY_LIMIT_REACHED', async () => {
    await using small = await makeTestApp()
    small.plans.setPlan('acme', { maxConcurrent: 1 })
    const call2 = (method: string, url: string, body?: unknown) => small.app.handle(req(method, url, { token: small.admin.token, body }))
    const a = (await json(await call2('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script([{ sleep: 5000 }]) })))
      .execution_id
    await waitFor(
      () => Promise.resolve(small.store.get(a)!.status),
      (s) => s === 'running',
    )
    expect((await call2('PATCH', path(a), { status: 'paused' })).status).toBe(202)
    const b = (await json(await call2('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script([{ sleep: 5000 }]) })))
      .execution_id
    await waitFor(
      () => Promise.resolve(small.store.get(b)!.status),
      (s) => s === 'running',
    )
    const res = await call2('PATCH', path(a), { status: 'running' })
    expect(res.status).toBe(409)
    expect(await json(res)).toMatchObject({ code: 'CONCURRENCY_LIMIT_REACHED' })
  })

  test('stop_turn: 200 confirmed, the turn ends with no answer, the session stays open; then NO_ACTIVE_TURN', async () => {
    const id = await start(script([{ sleep: 10_000 }, { answer: 'never' }]))
    await running(id)
    await inTurn(id)
    const res = await call('PATCH', path(id), { status: 'stop_turn' })
    expect(res.status).toBe(200)
    expect(await json(res)).toEqual({ ok: true, status: 'stop_turn_confirmed' })
    const after = await settle(id)
    expect(after.status).toBe('completed')
    expect((await json(await call('GET', path(id, '/result')))).result).toBeNull()
    const again = await call('PATCH', path(id), { status: 'stop_turn' })
    expect(again.status).toBe(409)
    expect(await json(again)).toMatchObject({ code: 'NO_ACTIVE_TURN' })
    expect((await call('POST', path(id, '/messages'), { content: 'carry on' })).status).toBe(200)
    expect(
      (
        await waitFor(
          () => get(id),
          (s) => s.turns_count === 2,
        )
      ).summary,
    ).toBe('Done: carry on')
  })

  test('queued follow-ups are delivered after a stop_turn', async () => {
    const id = await start(script([{ sleep: 10_000 }]))
    await running(id)
    await inTurn(id)
    expect((await call('POST', path(id, '/messages'), { content: 'next please' })).status).toBe(202)
    expect((await call('PATCH', path(id), { status: 'stop_turn' })).status).toBe(200)
    const done = await waitFor(
      () => get(id),
      (s) => s.turns_count === 2 && s.status === 'completed',
    )
    expect(done.summary).toBe('Done: next please')
  })

  test('cancel during a turn kills the harness: no process of the sandbox survives', async () => {
    // A duration nothing else on the machine sleeps for, matched exactly: `sleep 30` also matched `sleep 300`.
    const id = await start(script([{ bash: 'sleep 29.75 & echo started' }, { sleep: 10_000 }]))
    await waitFor(async () => t.store.allEvents(id).some((e) => e.type === 'tool_result'), Boolean)
    expect((await call('PATCH', path(id), { status: 'cancelled' })).status).toBe(200)
    // The sandbox's folder goes last, once its processes are dead: then not one may be left.
    await poll('the sandbox removed', () => !existsSync(join(t.dir, 'sandboxes', id)))
    const survivors = Bun.spawnSync(['pgrep', '-x', '-f', 'sleep 29.75']).stdout.toString().trim()
    expect(survivors).toBe('')
  })

  test('any other field or status is 400', async () => {
    const id = await start('hello')
    expect((await call('PATCH', path(id), { status: 'running', extra: 1 })).status).toBe(400)
    expect((await call('PATCH', path(id), { status: 'completed' })).status).toBe(400)
  })
})

describe('GET …/logs', () => {
  test('stored lines with the status, source stored, not truncated', async () => {
    const id = await start('hello')
    await settle(id)
    const logs = await json(await call('GET', path(id, '/logs')))
    expect(logs).toMatchObject({ source: 'stored', status: 'completed', truncated: false })
    expect(logs.logs).toContain('agentd: status running')
    expect(logs.logs).toContain('agentd: status completed')
    // Each model request of the turn: when it came, and what the gateway answered how fast.
    expect(logs.logs).toMatch(/gateway: POST \/v1\/responses\n/)
    expect(logs.logs).toMatch(/gateway: POST \/v1\/responses answered 200 in \d+ ms\n/)
    const lines = logs.logs.split('\n')
    expect(lines.findIndex((l: string) => l.endsWith('gateway: POST /v1/responses'))).toBeLessThan(
      lines.findIndex((l: string) => l.includes('answered 200')),
    )
  })

  test('404 for an unknown session', async () => {
    expect((await call('GET', path('00000000-0000-0000-0000-000000000000', '/logs'))).status).toBe(404)
  })
})
