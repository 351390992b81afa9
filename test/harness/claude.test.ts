/**
 * Runs the real Claude Code CLI against a real gateway speaking for the scripted model. A small
 * recording proxy in front of the gateway lets tests see what the CLI sent.
 */
import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTurn, claudeAdapter, claudeBinPath } from '../../src/harness/claude'
import { PROMPT_FILE, withPromptOnStdin } from '../../src/harness/common'
import type { TurnOutcome, TurnSpec } from '../../src/harness/harness'
import { startLab, type LabSession } from '../helpers/harness'

const lab = startLab('claude')
afterAll(() => lab.close())

type Session = LabSession
const newSession = () => lab.newSession()
const runTurn = (session: Session, prompt: string, extra: Partial<TurnSpec> = {}) => lab.runTurn(claudeAdapter, session, prompt, extra)
const requestsOf = (session: Session) => lab.requestsOf(session).map((r) => r.body)

const script = (steps: unknown) => `Scripted task\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\``

describe('buildTurn', () => {
  test('builds the headless command with the gateway env', () => {
    const spec: TurnSpec = {
      prompt: 'hello',
      workspace: '/workspace',
      home: '/home/agent',
      gatewayUrl: 'http://127.0.0.1:9',
      gatewayToken: 'secret',
      model: 'scripted',
      effort: 'minimal',
      speed: 'fast',
      outputSchema: { type: 'object' },
      resumeId: 'abc',
    }
    const { argv, env, files } = buildTurn(spec)
    // The prompt is never in argv: a file in the home, on the CLI's stdin.
    expect(files).toEqual({ [PROMPT_FILE]: 'hello' })
    expect(argv).toEqual([
      ...withPromptOnStdin('/home/agent', []),
      claudeBinPath(),
      '-p',
      '--output-format',
      'stream-json',
      '--verbose',
      '--dangerously-skip-permissions',
      '--model',
      'scripted',
      '--resume',
      'abc',
      '--effort',
      'low',
      '--settings',
      '{"fastMode":true}',
      '--json-schema',
      '{"type":"object"}',
    ])
    expect(env).toMatchObject({
      HOME: '/home/agent',
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:9',
      ANTHROPIC_API_KEY: 'secret',
      IS_SANDBOX: '1',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    })
    expect(existsSync(claudeBinPath())).toBe(true)
  })
})

describe('claude CLI against the scripted model', () => {
  test('runs a bash step and reports answer, usage and tool calls', async () => {
    const session = newSession()
    const { outcome, exitCode } = await runTurn(session, script([{ bash: 'echo hi > hi.txt' }, { answer: 'ok' }]), { effort: 'medium' })
    expect(exitCode).toBe(0)
    expect(readFileSync(join(session.workspace, 'hi.txt'), 'utf8')).toBe('hi\n')
    expect(outcome).toMatchObject({
      answerText: 'ok',
      error: null,
      toolCalls: 1,
      toolErrors: 0,
      capture: 'complete',
      model: 'scripted',
      structured: null,
    })
    expect(outcome.resumeId).toMatch(/^[0-9a-f-]{36}$/)
    expect(outcome.harnessVersion).toBe('2.1.197')
    expect(outcome.usage!.input).toBeGreaterThan(0)
    expect(outcome.usage!.output).toBeGreaterThan(0)
    // --effort reaches the model request.
    expect(requestsOf(session)[0].output_config).toEqual({ effort: 'medium' })
  })

  test('a fail step fails the turn with its message', async () => {
    const { outcome, events, exitCode } = await runTurn(newSession(), script([{ say: 'trying' }, { fail: 'boom' }]))
    expect(exitCode).toBe(1)
    expect(outcome.error).toContain('boom')
    expect(outcome.answerText).toBeNull()
    expect(outcome.capture).toBe('complete')
    expect(events.filter((e) => e.type === 'error').map((e) => e.content)).toEqual(['API Error: 400 boom'])
    expect(events.at(-1)).toMatchObject({ type: 'result', success: false })
  })

  test('an output schema turn returns the structured object', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] }
    const { outcome } = await runTurn(newSession(), script([{ structured: { n: 1 } }]), { outputSchema: schema })
    expect(outcome.error).toBeNull()
    expect(outcome.structured).toEqual({ n: 1 })
    expect(outcome.answerText).toBe('{"n":1}')
  })

  test('think, say, write and artifact steps produce files and normalized events in order', async () => {
    const session = newSession()
    const { events, outcome } = await runTurn(
      session,
      script([
        { think: 'plan it' },
        { say: 'writing' },
        { write: { path: 'src/a.txt', content: 'A' } },
        { artifact: { name: 'report.md', content: '# Report' } },
        { answer: 'all done' },
      ]),
    )
    expect(readFileSync(join(session.workspace, 'src/a.txt'), 'utf8')).toBe('A')
    expect(readFileSync(join(session.workspace, '.agentd/artifacts/report.md'), 'utf8')).toBe('# Report')
    // The turn's prompt is reported as the user's message right after init (the stream has no echo).
    expect(events[1]).toMatchObject({ type: 'message', role: 'user' })
    events.splice(1, 1)
    expect(events.map((e) => e.type)).toEqual([
      'init',
      'thinking',
      'message',
      'tool_use',
      'tool_result',
      'tool_use',
      'tool_result',
      'message',
      'usage',
      'result',
    ])
    expect(events.every((e) => e.agent === 'harness_1' && !Number.isNaN(Date.parse(e.timestamp)))).toBe(true)
    expect(events[1]).toMatchObject({ content: 'plan it' })
    expect(events[2]).toMatchObject({ role: 'assistant', content: 'writing' })
    expect(events[3]).toMatchObject({ tool: 'Write', path: join(session.workspace, 'src/a.txt'), args: { content: 'A' } })
    expect(events[4]).toMatchObject({ callId: events[3]!.callId, success: true })
    expect(events[5]).toMatchObject({ tool: 'Write', path: join(session.workspace, '.agentd/artifacts/report.md') })
    expect(events[7]).toMatchObject({ role: 'assistant', content: 'all done' })
    expect(events[8]!.inputTokens).toBe(outcome.usage!.input)
    expect(outcome).toMatchObject({ answerText: 'all done', toolCalls: 2 })
  })

  test('a follow-up turn resumes the conversation and answers Done with its first line', async () => {
    const session = newSession()
    const first = await runTurn(session, script([{ bash: 'echo 1 > one.txt' }, { answer: 'first' }]))
    expect(first.outcome.answerText).toBe('first')
    const sent = requestsOf(session).length

    // A prompt starting with dashes must not be read as a CLI option.
    const second = await runTurn(session, '--check again\nsecond line', { resumeId: first.outcome.resumeId! })
    expect(second.outcome).toMatchObject({ answerText: 'Done: --check again', resumeId: first.outcome.resumeId, error: null })

    const followUp = requestsOf(session).slice(sent)
    expect(followUp).toHaveLength(1)
    const history = JSON.stringify(followUp[0].messages)
    expect(history).toContain('echo 1 > one.txt')
    expect(history).toContain('"first"')
    expect(history).toContain('--check again\\nsecond line')
  })

  test('a stream cut off before the result line is a partial capture', async () => {
    const { lines } = await runTurn(newSession(), script([{ bash: 'true' }, { answer: 'ok' }]))
    const parser = claudeAdapter.createParser()
    const half = lines.filter((l) => l.trim() !== '').slice(0, -2)
    for (const line of half) parser.push(line)
    parser.push('{"type":"assistant","message":{"content":[{"type":"te') // the cut line
    const outcome: TurnOutcome = parser.finish(null)
    expect(outcome.capture).toBe('partial')
    expect(outcome.answerText).toBeNull()
    expect(outcome.error).toContain('before reporting a result')
    expect(outcome.resumeId).not.toBeNull()
  })
})

describe('stream parser', () => {
  test('ignores non-JSON lines and reports a silent run as a failed capture', () => {
    const parser = claudeAdapter.createParser()
    expect(parser.push('Warning: something on stdout')).toEqual([])
    expect(parser.push('')).toEqual([])
    expect(parser.push('[1,2]')).toEqual([])
    expect(parser.finish(1)).toMatchObject({ capture: 'failed', error: 'claude exited with code 1 before reporting a result' })
  })

  test('counts failing tool results', () => {
    const parser = claudeAdapter.createParser()
    const events = parser.push(
      JSON.stringify({
        type: 'user',
        message: {
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'Exit code 2' }], is_error: true }],
        },
      }),
    )
    expect(events).toMatchObject([{ type: 'tool_result', callId: 't1', output: 'Exit code 2', success: false }])
    expect(parser.finish(0).toolErrors).toBe(1)
  })
})
