import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { startGateway, type Gateway, type UsageRecord } from '../../src/gateway/gateway'
import { sampleOf } from '../../src/gateway/gemini'

const TOKEN = 'agw_gemini_token'
let gateway: Gateway
const usage: UsageRecord[] = []

beforeAll(() => {
  gateway = startGateway({
    resolve: (token) => (token === TOKEN ? { sessionId: 'sess-g', workspace: '/workspace' } : null),
    onUsage: (u) => usage.push(u),
  })
})
afterAll(() => gateway.stop())

const script = (steps: unknown) => `Task\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\``
const json = (res: Response): Promise<any> => res.json()
const TOOLS = [{ functionDeclarations: [{ name: 'run_shell_command' }, { name: 'write_file' }] }]

function post(method: string, body: unknown, opts: { key?: string | null; model?: string; query?: string; signal?: AbortSignal } = {}) {
  const key = opts.key === undefined ? TOKEN : opts.key
  const query = opts.query ?? (method === 'streamGenerateContent' ? '?alt=sse' : '')
  return fetch(`${gateway.url}/v1beta/models/${opts.model ?? 'scripted'}:${method}${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'x-goog-api-key': key } : {}) },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal: opts.signal,
  })
}

/** The Gemini CLI's first request: session context and the prompt as two parts of one user turn. */
const request = (text: string, extra: Record<string, unknown> = {}) => ({
  contents: [{ role: 'user', parts: [{ text: '<session_context>\nThis is the Gemini CLI.\n</session_context>' }, { text }] }],
  tools: TOOLS,
  ...extra,
})

/** SSE frames of `data:` only, separated by CRLF pairs as Google sends them. */
async function readChunks(res: Response): Promise<any[]> {
  const text = await res.text()
  expect(text.endsWith('\r\n\r\n')).toBe(true)
  return text
    .trimEnd()
    .split('\r\n\r\n')
    .map((frame) => {
      expect(frame).toStartWith('data: ')
      return JSON.parse(frame.slice('data: '.length))
    })
}

describe('routes and auth', () => {
  test('the key is accepted as x-goog-api-key or ?key=; otherwise 401 in Google error shape', async () => {
    const denied = await post('generateContent', request('hi'), { key: 'wrong' })
    expect(denied.status).toBe(401)
    expect((await json(denied)).error).toMatchObject({ code: 401, status: 'UNAUTHENTICATED' })
    expect((await post('generateContent', request('hi'), { key: null })).status).toBe(401)
    expect((await post('generateContent', request('hi'), { key: null, query: `?key=${TOKEN}` })).status).toBe(200)
  })

  test('a malformed body is a 400 INVALID_ARGUMENT; countTokens answers an estimate', async () => {
    const res = await post('generateContent', '{nope')
    expect(res.status).toBe(400)
    expect((await json(res)).error.status).toBe('INVALID_ARGUMENT')
    const count = await json(await post('countTokens', request('abcd')))
    expect(count.totalTokens).toBeGreaterThan(0)
  })
})

describe('the agent loop', () => {
  test('streams one chunk per part, text in pieces; the last has the finish reason and usage', async () => {
    const res = await post(
      'streamGenerateContent',
      request(script([{ think: 'plan' }, { say: 'now running it' }, { bash: 'ls / | head -3' }, { answer: 'ok' }])),
    )
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const chunks = await readChunks(res)
    expect(chunks.map((c) => c.candidates[0].content.parts)).toEqual([
      [{ text: 'plan', thought: true }],
      [{ text: 'now ' }],
      [{ text: 'running it' }],
      [{ functionCall: { name: 'run_shell_command', args: { command: 'ls / | head -3', description: 'Run ls / | head -3' } } }],
    ])
    expect(chunks.slice(0, 3).every((c) => c.usageMetadata === undefined && c.candidates[0].finishReason === undefined)).toBe(true)
    expect(chunks[3].candidates[0].finishReason).toBe('STOP')
    expect(chunks[3].usageMetadata.candidatesTokenCount).toBeGreaterThan(0)
    expect(chunks[3].modelVersion).toBe('scripted')
  })

  test('after a function response the next step follows; write uses write_file with an absolute path', async () => {
    const body = request(
      script([
        { bash: 'ls' },
        { write: { path: 'a/b.txt', content: 'B' } },
        { artifact: { name: 'r.md', content: '#' } },
        { answer: 'fin' },
      ]),
    )
    body.contents.push(
      { role: 'model', parts: [{ functionCall: { name: 'run_shell_command', args: { command: 'ls' } } } as never] },
      { role: 'user', parts: [{ functionResponse: { name: 'run_shell_command', response: { output: 'x' } } } as never] },
    )
    const second = await json(await post('generateContent', body))
    expect(second.candidates[0].content.parts).toEqual([
      { functionCall: { name: 'write_file', args: { file_path: '/workspace/a/b.txt', content: 'B' } } },
    ])
    body.contents.push(
      { role: 'model', parts: [second.candidates[0].content.parts[0]] },
      { role: 'user', parts: [{ functionResponse: { name: 'write_file', response: {} } } as never] },
    )
    const third = await json(await post('generateContent', body))
    expect(third.candidates[0].content.parts[0].functionCall.args.file_path).toBe('/workspace/.agentd/artifacts/r.md')
  })

  test('fail is a 400 INVALID_ARGUMENT carrying the message', async () => {
    const res = await post('streamGenerateContent', request(script([{ fail: 'boom' }])))
    expect(res.status).toBe(400)
    expect(await json(res)).toEqual({ error: { code: 400, message: 'boom', status: 'INVALID_ARGUMENT' } })
  })
})

describe('side calls without tools', () => {
  test('the router classifier gets an object conforming to its schema, with a mid-range score', async () => {
    const schema = {
      type: 'object',
      properties: { complexity_reasoning: { type: 'string' }, complexity_score: { type: 'integer', minimum: 1, maximum: 100 } },
      required: ['complexity_reasoning', 'complexity_score'],
    }
    const body = {
      contents: [{ role: 'user', parts: [{ text: script([{ bash: 'rm -rf /' }]) }] }],
      generationConfig: { responseMimeType: 'application/json', responseJsonSchema: schema },
    }
    const res = await json(await post('generateContent', body, { model: 'gemini-3.5-flash-lite' }))
    expect(JSON.parse(res.candidates[0].content.parts[0].text)).toEqual({ complexity_reasoning: 'scripted', complexity_score: 51 })
  })

  test('the session summary quotes the user’s first line, at most 80 characters', async () => {
    const prompt = `Summarize the user's primary intent or goal in this conversation in ONE sentence (max 80 characters).\n\nConversation:\nUser: ${'Fix the login bug '.repeat(6)}\n\nAssistant: ok\n\nSummary (max 80 chars):`
    const res = await json(await post('generateContent', { contents: [{ role: 'user', parts: [{ text: prompt }] }] }))
    const text: string = res.candidates[0].content.parts[0].text
    expect(text).toStartWith('Fix the login bug')
    expect(text.length).toBe(80)
  })

  test('schemas in Gemini’s OpenAPI subset (upper-case types, enums, arrays) are sampled too', () => {
    expect(
      sampleOf({
        type: 'OBJECT',
        properties: {
          kind: { type: 'STRING', enum: ['a', 'b'] },
          list: { type: 'ARRAY', minItems: 2, items: { type: 'BOOLEAN' } },
          n: { type: 'NUMBER' },
        },
      }),
    ).toEqual({
      kind: 'a',
      list: [false, false],
      n: 1,
    })
  })
})

describe('metering', () => {
  test('usage is metered per reply under the model of the path; cached tokens are inside the prompt count', async () => {
    usage.length = 0
    const res = await json(
      await post('generateContent', request(script([{ usage: { input: 5, output: 6, cache_read: 7 } }, { answer: 'x' }]))),
    )
    expect(res.usageMetadata).toEqual({ promptTokenCount: 12, candidatesTokenCount: 6, totalTokenCount: 18, cachedContentTokenCount: 7 })
    expect(usage).toEqual([{ sessionId: 'sess-g', model: 'scripted', input: 5, output: 6, cacheRead: 7, cacheWrite: 0 }])
  })

  test('sleep stalls the stream', async () => {
    const started = performance.now()
    const chunks = await readChunks(await post('streamGenerateContent', request(script([{ sleep: 300 }, { answer: 'late' }]))))
    expect(performance.now() - started).toBeGreaterThanOrEqual(290)
    expect(chunks.map((c) => c.candidates[0].content.parts[0].text).join('')).toBe('late')
  })
})
