import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { GATEWAY_MAX_BODY_BYTES, startGateway, type Gateway, type UsageRecord } from '../../src/gateway/gateway'

const TOKEN = 'agw_test_token'
const WORKSPACE = '/workspace'
let gateway: Gateway
const usage: UsageRecord[] = []

beforeAll(() => {
  gateway = startGateway({
    resolve: (token) => (token === TOKEN ? { sessionId: 'sess-1', workspace: WORKSPACE } : null),
    onUsage: (u) => usage.push(u),
  })
})
afterAll(() => gateway.stop())

const script = (steps: unknown) => `Task\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\``

function post(body: unknown, headers: Record<string, string> = { 'x-api-key': TOKEN }, signal?: AbortSignal) {
  return fetch(`${gateway.url}/v1/messages?beta=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  })
}

const request = (content: unknown, extra: Record<string, unknown> = {}) => ({
  model: 'scripted',
  max_tokens: 1000,
  stream: true,
  messages: [{ role: 'user', content }],
  ...extra,
})

/** Response bodies are checked field by field below; `any` keeps those checks short. */
const json = (res: Response): Promise<any> => res.json()

interface SseEvent {
  event: string
  data: Record<string, any>
}

/** Splits an SSE body into frames and checks each frame's `event:` matches its data's type. */
async function readSse(res: Response): Promise<SseEvent[]> {
  const text = await res.text()
  expect(text.endsWith('\n\n')).toBe(true)
  return text
    .trimEnd()
    .split('\n\n')
    .map((frame) => {
      const [eventLine, dataLine, ...rest] = frame.split('\n')
      expect(rest).toEqual([])
      expect(eventLine).toStartWith('event: ')
      expect(dataLine).toStartWith('data: ')
      const event = { event: eventLine!.slice(7), data: JSON.parse(dataLine!.slice(6)) }
      expect(event.data.type).toBe(event.event)
      return event
    })
}

describe('routes and auth', () => {
  test('HEAD / answers the connectivity probe', async () => {
    const res = await fetch(`${gateway.url}/`, { method: 'HEAD' })
    expect(res.status).toBe(200)
  })

  test('unknown routes are a 404 JSON error', async () => {
    const res = await fetch(`${gateway.url}/v1/nothing`)
    expect(res.status).toBe(404)
    expect((await json(res)).type).toBe('error')
  })

  test('an unknown key is a 401 in Anthropic error shape', async () => {
    const res = await post(request('hi'), { 'x-api-key': 'wrong' })
    expect(res.status).toBe(401)
    expect(await json(res)).toEqual({ type: 'error', error: { type: 'authentication_error', message: 'invalid x-api-key' } })
    expect((await post(request('hi'), {})).status).toBe(401)
  })

  test('a Bearer token is accepted too', async () => {
    const res = await post(request('hi', { stream: false }), { authorization: `Bearer ${TOKEN}` })
    expect(res.status).toBe(200)
  })

  test('a malformed body is a 400, not a crash', async () => {
    const res = await post('{not json')
    expect(res.status).toBe(400)
    expect((await json(res)).error.type).toBe('invalid_request_error')
  })
})

describe('replies', () => {
  test('streams thinking, text and a Bash tool_use with correct SSE framing', async () => {
    const res = await post(request(script([{ think: 'plan' }, { say: 'running' }, { bash: 'echo hi > hi.txt' }, { answer: 'ok' }])))
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const events = await readSse(res)
    expect(events.map((e) => e.event)).toEqual([
      'message_start',
      ...['content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_stop'],
      ...['content_block_start', 'content_block_delta', 'content_block_stop'],
      ...['content_block_start', 'content_block_delta', 'content_block_stop'],
      'message_delta',
      'message_stop',
    ])
    const start = events[0]!.data.message
    expect(start).toMatchObject({ type: 'message', role: 'assistant', model: 'scripted', content: [], stop_reason: null })
    expect(events[1]!.data.content_block).toEqual({ type: 'thinking', thinking: '', signature: '' })
    expect(events[2]!.data.delta).toEqual({ type: 'thinking_delta', thinking: 'plan' })
    expect(events[3]!.data.delta.type).toBe('signature_delta')
    expect(events[6]!.data.delta).toEqual({ type: 'text_delta', text: 'running' })
    const tool = events[8]!.data
    expect(tool.index).toBe(2)
    expect(tool.content_block).toMatchObject({ type: 'tool_use', name: 'Bash', input: {} })
    expect(tool.content_block.id).toStartWith('toolu_')
    expect(JSON.parse(events[9]!.data.delta.partial_json)).toEqual({ command: 'echo hi > hi.txt', description: 'Run echo hi > hi.txt' })
    expect(events[11]!.data.delta.stop_reason).toBe('tool_use')
    expect(events[11]!.data.usage.output_tokens).toBeGreaterThan(0)
  })

  test('later steps follow from the history; system entries and reminders are ignored', async () => {
    const res = await post({
      ...request([
        { type: 'text', text: '<system-reminder>\ncontext\n</system-reminder>' },
        { type: 'text', text: script([{ bash: 'ls' }, { write: { path: 'src/a.ts', content: 'A' } }, { answer: 'ok' }]) },
      ]),
      stream: false,
    })
    expect((await json(res)).content[0].name).toBe('Bash')

    const messages = [
      {
        role: 'user',
        content: script([{ bash: 'ls' }, { write: { path: 'src/a.ts', content: 'A' } }, { artifact: { name: 'r.md', content: '#' } }]),
      },
      { role: 'system', content: 'Available agent types: ...' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'Bash', input: { command: 'ls' } }] },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'toolu_1', content: 'x' },
          { type: 'text', text: '<system-reminder>r</system-reminder>' },
        ],
      },
    ]
    const second = await json(await post({ model: 'scripted', max_tokens: 10, messages }))
    expect(second.content[0]).toMatchObject({ type: 'tool_use', name: 'Write', input: { file_path: '/workspace/src/a.ts', content: 'A' } })

    messages.push(
      { role: 'assistant', content: [second.content[0]] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'x', content: 'ok' }] },
    )
    const third = await json(await post({ model: 'scripted', max_tokens: 10, messages }))
    expect(third.content[0].input).toEqual({ file_path: '/workspace/.agentd/artifacts/r.md', content: '#' })
  })

  test('non-streaming replies are one JSON message', async () => {
    const res = await post(request(script([{ say: 'hello' }]), { stream: false }))
    const body = await json(res)
    expect(body).toMatchObject({ type: 'message', role: 'assistant', stop_reason: 'end_turn', content: [{ type: 'text', text: 'hello' }] })
    expect(body.id).toStartWith('msg_')
  })

  test('structured uses the StructuredOutput tool when offered, else answers JSON text', async () => {
    const steps = script([{ structured: { n: 1 } }])
    const offered = await json(await post(request(steps, { stream: false, tools: [{ name: 'Bash' }, { name: 'StructuredOutput' }] })))
    expect(offered.content[0]).toMatchObject({ type: 'tool_use', name: 'StructuredOutput', input: { n: 1 } })
    const plain = await json(await post(request(steps, { stream: false })))
    expect(plain.content).toEqual([{ type: 'text', text: '{"n":1}' }])
  })

  test('fail is a 400 invalid_request_error carrying the message', async () => {
    const res = await post(request(script([{ say: 'x' }, { fail: 'boom' }])))
    expect(res.status).toBe(400)
    expect(await json(res)).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'boom' } })
  })

  test('an invalid script fails the request with a clear message', async () => {
    const res = await post(request('```agentd-script\n[{"bash": 42}]\n```'))
    expect(res.status).toBe(400)
    expect((await json(res)).error.message).toBe('invalid agentd-script: step 1: "bash" takes a string')
  })
})

describe('metering and stalls', () => {
  test('every reply is metered per session with estimated or scripted tokens', async () => {
    usage.length = 0
    const body = request(script([{ answer: 'abcdefgh' }]), { stream: false })
    await json(await post(body))
    expect(usage).toEqual([
      { sessionId: 'sess-1', model: 'scripted', input: Math.ceil(JSON.stringify(body).length / 4), output: 2, cacheRead: 0, cacheWrite: 0 },
    ])

    const events = await readSse(
      await post(request(script([{ usage: { input: 5, output: 6, cache_read: 7, cache_write: 8 } }, { answer: 'x' }]))),
    )
    expect(events[0]!.data.message.usage).toEqual({
      input_tokens: 5,
      output_tokens: 0,
      cache_read_input_tokens: 7,
      cache_creation_input_tokens: 8,
    })
    expect(events.at(-2)!.data.usage).toEqual({
      input_tokens: 5,
      output_tokens: 6,
      cache_read_input_tokens: 7,
      cache_creation_input_tokens: 8,
    })
    expect(usage[1]).toEqual({ sessionId: 'sess-1', model: 'scripted', input: 5, output: 6, cacheRead: 7, cacheWrite: 8 })
  })

  test('sleep stalls the reply', async () => {
    const started = performance.now()
    const events = await readSse(await post(request(script([{ sleep: 300 }, { answer: 'late' }]))))
    expect(performance.now() - started).toBeGreaterThanOrEqual(290)
    expect(events[2]!.data.delta.text).toBe('late')
  })

  test('a reply abandoned during its stall is not metered', async () => {
    usage.length = 0
    const abort = new AbortController()
    const res = await post(request(script([{ sleep: 600 }, { answer: 'never' }])), undefined, abort.signal)
    expect(res.status).toBe(200)
    abort.abort()
    await Bun.sleep(800)
    expect(usage).toEqual([])
  })
})

test('a request body over the gateway cap is refused before it is buffered, and the gateway goes on serving', async () => {
  const res = await post('x'.repeat(GATEWAY_MAX_BODY_BYTES + 1))
  expect(res.status).toBe(413)
  expect((await post(request(script([{ answer: 'still here' }])))).status).toBe(200)
})
