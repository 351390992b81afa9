import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { startGateway, type Gateway, type UsageRecord } from '../../src/gateway/gateway'

const TOKEN = 'agw_openai_token'
let gateway: Gateway
const usage: UsageRecord[] = []

beforeAll(() => {
  gateway = startGateway({
    resolve: (token) => (token === TOKEN ? { sessionId: 'sess-o', workspace: '/workspace' } : null),
    onUsage: (u) => usage.push(u),
  })
})
afterAll(() => gateway.stop())

const script = (steps: unknown) => `Task\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\``
const json = (res: Response): Promise<any> => res.json()
const SHELL = { type: 'function', name: 'exec_command', parameters: { type: 'object' } }

function post(body: unknown, headers: Record<string, string> = { authorization: `Bearer ${TOKEN}` }, signal?: AbortSignal) {
  return fetch(`${gateway.url}/v1/responses`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  })
}

/** Codex's request shape: developer instructions, injected context, then the user's text. */
const request = (text: string, extra: Record<string, unknown> = {}) => ({
  model: 'scripted',
  stream: false,
  tools: [SHELL],
  input: [
    { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'You are Codex.' }] },
    {
      type: 'message',
      role: 'user',
      content: [{ type: 'input_text', text: '<environment_context>\n  <cwd>/workspace</cwd>\n</environment_context>' }],
    },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text }] },
  ],
  ...extra,
})

async function readSse(res: Response): Promise<{ event: string; data: any }[]> {
  const text = await res.text()
  return text
    .trimEnd()
    .split('\n\n')
    .filter((frame) => !frame.startsWith(':'))
    .map((frame) => {
      const [eventLine, dataLine] = frame.split('\n')
      const event = { event: eventLine!.slice('event: '.length), data: JSON.parse(dataLine!.slice('data: '.length)) }
      expect(event.data.type).toBe(event.event)
      return event
    })
}

describe('routes and auth', () => {
  test('a wrong or missing key is a 401 in OpenAI error shape', async () => {
    const res = await post(request('hi'), { authorization: 'Bearer nope' })
    expect(res.status).toBe(401)
    expect((await json(res)).error).toMatchObject({ type: 'invalid_api_key', code: 'invalid_api_key' })
    expect((await post(request('hi'), {})).status).toBe(401)
  })

  test('a malformed body is a 400 invalid_request_error', async () => {
    for (const body of ['{not json', { input: [] }, { model: 'scripted', input: 5 }]) {
      const res = await post(body)
      expect(res.status).toBe(400)
      expect((await json(res)).error.type).toBe('invalid_request_error')
    }
  })
})

describe('replies', () => {
  test('streams reasoning, a message and a shell call in documented event order', async () => {
    const res = await post(
      request(script([{ think: 'plan' }, { say: 'running' }, { bash: 'ls / | head -3' }, { answer: 'ok' }]), { stream: true }),
    )
    expect(res.headers.get('content-type')).toStartWith('text/event-stream')
    const events = await readSse(res)
    expect(events.map((e) => e.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.reasoning_summary_part.added',
      'response.reasoning_summary_text.delta',
      'response.reasoning_summary_text.done',
      'response.reasoning_summary_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ])
    expect(events.map((e) => e.data.sequence_number)).toEqual(events.map((_, i) => i))
    expect(events[7]!.data.item).toMatchObject({ type: 'reasoning', summary: [{ type: 'summary_text', text: 'plan' }] })
    expect(events[10]!.data.delta).toBe('running')
    const call = events[17]!.data.item
    expect(call).toMatchObject({ type: 'function_call', name: 'exec_command', status: 'completed' })
    expect(call.call_id).toStartWith('call_')
    expect(JSON.parse(call.arguments)).toEqual({ cmd: 'ls / | head -3', yield_time_ms: 30_000 })
    const completed = events.at(-1)!.data.response
    expect(completed.status).toBe('completed')
    expect(completed.output).toHaveLength(3)
    expect(completed.usage.output_tokens).toBeGreaterThan(0)
  })

  test('later steps follow from the history; write becomes a byte-exact shell command', async () => {
    const steps = script([{ bash: 'ls' }, { write: { path: 'src/it’s.txt', content: "a 'quoted'\nline" } }, { answer: 'done' }])
    const history = request(steps)
    history.input.push(
      { type: 'function_call', call_id: 'call_1', name: 'exec_command', arguments: '{"cmd":"ls"}' } as never,
      { type: 'function_call_output', call_id: 'call_1', output: 'Process exited with code 0' } as never,
    )
    const second = await json(await post(history))
    const args = JSON.parse(second.output[0].arguments)
    expect(args.cmd).toBe(`mkdir -p '/workspace/src' && printf '%s' 'a '\\''quoted'\\''\nline' > '/workspace/src/it’s.txt'`)
    // The command really writes those bytes (run with the workspace moved to a temp folder).
    const dir = mkdtempSync(join(tmpdir(), 'agentd-openai-'))
    expect(Bun.spawnSync(['bash', '-c', args.cmd.replaceAll('/workspace', dir)]).exitCode).toBe(0)
    expect(readFileSync(join(dir, 'src/it’s.txt'), 'utf8')).toBe("a 'quoted'\nline")
    rmSync(dir, { recursive: true, force: true })

    history.input.push(
      { type: 'function_call', call_id: 'call_2', name: 'exec_command', arguments: second.output[0].arguments } as never,
      { type: 'function_call_output', call_id: 'call_2', output: '' } as never,
    )
    const third = await json(await post(history))
    expect(third.output).toMatchObject([{ type: 'message', content: [{ type: 'output_text', text: 'done' }] }])
  })

  test('uses whichever shell tool Codex offers', async () => {
    const body = (tools: unknown[]) => request(script([{ bash: 'pwd' }, { answer: 'x' }]), { tools })
    const shellCommand = await json(await post(body([{ type: 'function', name: 'shell_command' }])))
    expect(JSON.parse(shellCommand.output[0].arguments)).toEqual({ command: 'pwd' })
    const shell = await json(await post(body([{ type: 'function', name: 'shell' }])))
    expect(JSON.parse(shell.output[0].arguments)).toEqual({ command: ['bash', '-lc', 'pwd'] })
    const none = await json(await post(body([])))
    expect(none.output[0].type).toBe('message')
  })

  test('fail is a 400 carrying the message; an invalid script explains itself', async () => {
    const res = await post(request(script([{ fail: 'boom' }])))
    expect(res.status).toBe(400)
    expect((await json(res)).error).toMatchObject({ message: 'boom', type: 'invalid_request_error' })
    const bad = await post(request('```agentd-script\n[{"bash": 1}]\n```'))
    expect((await json(bad)).error.message).toBe('invalid agentd-script: step 1: "bash" takes a string')
  })
})

describe('text.format json_schema is enforced', () => {
  const format = {
    type: 'json_schema',
    strict: true,
    name: 'codex_output_schema',
    schema: { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false },
  }

  test('a conforming structured step is the final message', async () => {
    const body = await json(await post(request(script([{ structured: { n: 1 } }]), { text: { format } })))
    expect(body.output).toMatchObject([{ type: 'message', content: [{ text: '{"n":1}' }] }])
  })

  test('a non-conforming or non-JSON final text fails as the provider would refuse it', async () => {
    const wrong = await post(request(script([{ structured: { n: 'one' } }]), { text: { format } }))
    expect(wrong.status).toBe(400)
    expect((await json(wrong)).error.message).toContain('does not match text.format schema "codex_output_schema"')
    const prose = await post(request(script([{ answer: 'plain words' }]), { text: { format } }))
    expect((await json(prose)).error.message).toContain('is not JSON')
  })

  test('tool calls are not constrained', async () => {
    const res = await post(request(script([{ bash: 'ls' }, { structured: { n: 2 } }]), { text: { format } }))
    expect(res.status).toBe(200)
    expect((await json(res)).output[0].type).toBe('function_call')
  })
})

describe('metering and stalls', () => {
  test('every reply is metered; cached tokens are inside input_tokens on the wire', async () => {
    usage.length = 0
    const body = await json(
      await post(request(script([{ usage: { input: 5, output: 6, cache_read: 7, cache_write: 0 } }, { answer: 'x' }]))),
    )
    expect(body.usage).toEqual({
      input_tokens: 12,
      input_tokens_details: { cached_tokens: 7 },
      output_tokens: 6,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 18,
    })
    expect(usage).toEqual([{ sessionId: 'sess-o', model: 'scripted', input: 5, output: 6, cacheRead: 7, cacheWrite: 0 }])
  })

  test('sleep stalls a streamed reply after response.created; an abandoned one is not metered', async () => {
    const started = performance.now()
    const events = await readSse(await post(request(script([{ sleep: 300 }, { answer: 'late' }]), { stream: true })))
    expect(performance.now() - started).toBeGreaterThanOrEqual(290)
    expect(events.find((e) => e.event === 'response.output_text.delta')!.data.delta).toBe('late')

    usage.length = 0
    const abort = new AbortController()
    const res = await post(request(script([{ sleep: 600 }, { answer: 'never' }]), { stream: true }), undefined, abort.signal)
    expect(res.status).toBe(200)
    abort.abort()
    await Bun.sleep(800)
    expect(usage).toEqual([])
  })
})
