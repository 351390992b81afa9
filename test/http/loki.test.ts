import { afterAll, beforeAll, expect, test } from 'bun:test'
import { LokiLogs } from '../../src/transcript/loki'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * Session logs through Loki (spec 4.2 `source: loki`) against a local server speaking Loki's HTTP
 * API as its documentation describes it: `POST /loki/api/v1/push` with JSON streams
 * (`{streams: [{stream: {label: value}, values: [["<unix ns>", "<line>"]]}]}`) and
 * `GET /loki/api/v1/query_range` with a stream selector, nanosecond `start`/`end`, `limit` and
 * `direction`, answering `{status: "success", data: {resultType: "streams", result}}`.
 */

type Stream = { stream: Record<string, string>; values: [string, string][] }
const streams = new Map<string, Stream>()
let pushes = 0
let loki: ReturnType<typeof Bun.serve>
let t: TestApp

function lokiAnswer(request: Request): Response | Promise<Response> {
  const url = new URL(request.url)
  if (request.method === 'POST' && url.pathname === '/loki/api/v1/push') {
    if (!request.headers.get('content-type')?.startsWith('application/json'))
      return new Response('unsupported content type', { status: 415 })
    return (request.json() as Promise<{ streams?: Stream[] }>).then((body) => {
      const valid =
        Array.isArray(body.streams) &&
        body.streams.every(
          (s) =>
            Object.values(s.stream ?? {}).every((v) => typeof v === 'string') &&
            s.values.every(([ns, line]) => /^\d+$/.test(ns) && typeof line === 'string'),
        )
      if (!valid) return new Response('invalid push', { status: 400 })
      pushes++
      for (const s of body.streams!) {
        const key = JSON.stringify(Object.entries(s.stream).sort())
        const kept = streams.get(key) ?? { stream: s.stream, values: [] }
        kept.values.push(...s.values)
        streams.set(key, kept)
      }
      return new Response(null, { status: 204 })
    })
  }
  if (request.method === 'GET' && url.pathname === '/loki/api/v1/query_range') {
    // Equality matchers only: {a="x", b="y"}
    const selector = /^\{(.*)\}$/.exec(url.searchParams.get('query') ?? '')
    if (!selector) return Response.json({ status: 'error', error: 'parse error' }, { status: 400 })
    const matchers = [...selector[1]!.matchAll(/(\w+)\s*=\s*"([^"]*)"/g)].map((m) => [m[1]!, m[2]!] as const)
    const start = BigInt(url.searchParams.get('start') ?? '0')
    const end = BigInt(url.searchParams.get('end') ?? `${Date.now()}000000`)
    const limit = Number(url.searchParams.get('limit') ?? 100)
    const backward = (url.searchParams.get('direction') ?? 'backward') === 'backward'
    const order = (a: [string, string], b: [string, string]) => (BigInt(a[0]) < BigInt(b[0]) ? -1 : 1) * (backward ? -1 : 1)
    const result = [...streams.values()]
      .filter((s) => matchers.every(([k, v]) => s.stream[k] === v))
      .map((s) => ({
        stream: s.stream,
        values: s.values
          .filter(([ns]) => BigInt(ns) >= start && BigInt(ns) <= end)
          .sort(order)
          .slice(0, limit),
      }))
      .filter((s) => s.values.length > 0)
    return Response.json({ status: 'success', data: { resultType: 'streams', result, stats: {} } })
  }
  return new Response('not found', { status: 404 })
}

beforeAll(async () => {
  loki = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: lokiAnswer })
  t = await makeTestApp({ AGENTD_LOKI_URL: `http://127.0.0.1:${loki.port}/` })
})
afterAll(async () => {
  await t?.[Symbol.asyncDispose]()
  loki?.stop(true)
})

test('a session’s log lines are pushed to Loki with its labels and read back from there (source loki); without Loki, from the store', async () => {
  const created = await json(
    await t.app.handle(
      req('POST', '/o/acme/p/_/sessions', {
        token: t.admin.token,
        body: { agent: 'harness_2', prompt: script([{ say: 'hi' }, { answer: 'logged' }]) },
      }),
    ),
  )
  const id = created.execution_id
  await waitFor(
    async () => json(await t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token: t.admin.token }))),
    (s) => s.status === 'completed',
  )
  const read = async () => json(await t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}/logs`, { token: t.admin.token })))
  const fromLoki = await read()
  expect(fromLoki.source).toBe('loki')
  expect(fromLoki.logs).toContain('gateway: POST /v1/responses')
  expect(fromLoki.logs).toContain('agentd: status completed')
  // Status lines and Loki's lines in time order.
  expect(fromLoki.logs.indexOf('agentd: status running')).toBeLessThan(fromLoki.logs.indexOf('gateway: POST /v1/responses'))
  expect(pushes).toBeGreaterThan(0)
  const stream = [...streams.values()].find((s) => s.stream.session === id)
  expect(stream?.stream).toEqual({ service: 'agentd', org: t.org.id, session: id })

  // Loki gone: the same lines come from the store.
  loki.stop(true)
  const stored = await read()
  expect(stored.source).toBe('stored')
  expect(stored.logs).toContain('gateway: POST /v1/responses')
})

test('a line cut between two texts is pushed whole; a Loki that never answers a push holds no read up, and the store answers', async () => {
  streams.clear()
  const lokiAgain = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: lokiAnswer })
  try {
    const logs = new LokiLogs(`http://127.0.0.1:${lokiAgain.port}`, Date.now, () => {})
    logs.push('s-1', 'o-1', 'first half of a line, ')
    logs.push('s-1', 'o-1', 'second half\nand a whole one\n')
    await logs.flush()
    const found = await logs.query('s-1', Date.now() - 60_000, Date.now() + 60_000)
    expect(found?.lines.map((l) => l.line)).toEqual(['first half of a line, second half', 'and a whole one'])
  } finally {
    lokiAgain.stop(true)
  }

  // Pushes hang for good; queries answer with what Loki has (nothing of this session).
  const stuck = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    fetch: (request) =>
      new URL(request.url).pathname.endsWith('/push')
        ? new Promise<Response>(() => {})
        : Response.json({ status: 'success', data: { resultType: 'streams', result: [] } }),
  })
  await using slow = await makeTestApp({ AGENTD_LOKI_URL: `http://127.0.0.1:${stuck.port}` })
  try {
    const id = (
      await json(
        await slow.app.handle(
          req('POST', '/o/acme/p/_/sessions', { token: slow.admin.token, body: { agent: 'harness_2', prompt: script([{ answer: 'x' }]) } }),
        ),
      )
    ).execution_id
    await waitFor(
      async () => json(await slow.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token: slow.admin.token }))),
      (s) => s.status === 'completed',
    )
    const started = performance.now()
    const answer = await json(await slow.app.handle(req('GET', `/o/acme/p/_/sessions/${id}/logs`, { token: slow.admin.token })))
    expect(performance.now() - started).toBeLessThan(4000)
    expect(answer.source).toBe('stored')
    expect(answer.logs).toContain('gateway: POST /v1/responses')
  } finally {
    stuck.stop(true)
  }
}, 30_000)
