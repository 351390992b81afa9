/** The real Codex CLI against the scripted model (Responses protocol), and its command line. */
import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTurn, codexAdapter, codexBinPath } from '../../src/harness/codex'
import { PROMPT_FILE, withPromptOnStdin } from '../../src/harness/common'
import type { TurnSpec } from '../../src/harness/harness'
import { ACCEPTANCE_STEPS, scriptPrompt, startLab } from '../helpers/harness'

const lab = startLab('codex')
afterAll(() => lab.close())

const spec: TurnSpec = {
  prompt: '-starts with a dash',
  workspace: '/workspace',
  home: '/home/agent',
  gatewayUrl: 'http://127.0.0.1:9',
  gatewayToken: 'secret',
  model: 'scripted',
}

describe('buildTurn', () => {
  test('a first turn: codex exec --json, the prompt after --, config in CODEX_HOME', () => {
    const { argv, env, files } = buildTurn(spec)
    // `-`: the prompt comes on stdin from a file in the home, never in argv.
    expect(argv).toEqual([...withPromptOnStdin('/home/agent', []), codexBinPath(), 'exec', '--json', '--skip-git-repo-check', '-'])
    expect(files![PROMPT_FILE]).toBe('-starts with a dash')
    expect(existsSync(codexBinPath())).toBe(true)
    expect(env).toMatchObject({ HOME: '/home/agent', CODEX_HOME: '/home/agent/.codex', AGENTD_GATEWAY_KEY: 'secret' })
    const config = files!['.codex/config.toml']!
    for (const line of [
      'model = "scripted"',
      'model_provider = "agentd"',
      'sandbox_mode = "danger-full-access"',
      'check_for_update_on_startup = false',
      'model_catalog_json = "/home/agent/.codex/agentd-models.json"',
      'base_url = "http://127.0.0.1:9/v1"',
      'env_key = "AGENTD_GATEWAY_KEY"',
      'wire_api = "responses"',
      '[analytics]\nenabled = false',
      '[feedback]\nenabled = false',
      '[features]\nplugins = false',
    ]) {
      expect(config).toContain(line)
    }
    expect(JSON.parse(files!['.codex/agentd-models.json']!).models[0].slug).toBe('scripted')
  })

  test('a follow-up resumes the thread; schema, effort, speed and a pinned install are passed on', () => {
    const { argv, files } = buildTurn({
      ...spec,
      resumeId: 'thread-1',
      outputSchema: { type: 'object' },
      effort: 'max',
      speed: 'fast',
      model: 'gpt-5.5',
      cliRoot: '/cache/node_modules',
    })
    expect(argv).toEqual([
      ...withPromptOnStdin('/home/agent', []),
      codexBinPath('/cache/node_modules'),
      'exec',
      'resume',
      '--json',
      '--skip-git-repo-check',
      '--output-schema',
      '/home/agent/.codex/output-schema.json',
      'thread-1',
      '-',
    ])
    expect(files!['.codex/output-schema.json']).toBe('{"type":"object"}')
    expect(files!['.codex/config.toml']).toContain('model_reasoning_effort = "xhigh"')
    expect(files!['.codex/config.toml']).toContain('service_tier = "fast"')
    // A real model keeps Codex's own metadata.
    expect(files!['.codex/config.toml']).not.toContain('model_catalog_json')
    expect(files!['.codex/agentd-models.json']).toBeUndefined()
  })
})

describe('codex CLI against the scripted model', () => {
  const session = lab.newSession()
  let threadId = ''

  test('the acceptance script: events in order, the real exit codes, the file written', async () => {
    const { events, outcome, exitCode, stderr } = await lab.runTurn(codexAdapter, session, scriptPrompt(ACCEPTANCE_STEPS), {
      effort: 'low',
      speed: 'fast',
    })
    expect(exitCode).toBe(0)
    expect(stderr).not.toContain('Model metadata')
    expect(readFileSync(join(session.workspace, 'notes/out.txt'), 'utf8')).toBe('written by the agent')
    expect(events.map((e) => e.type)).toEqual([
      'init',
      'message',
      'thinking',
      'message',
      'tool_use',
      'tool_result',
      'tool_use',
      'tool_result',
      'tool_use',
      'tool_result',
      'message',
      'usage',
      'result',
    ])
    expect(events.every((e) => e.agent === 'harness_2')).toBe(true)
    expect(events[1]).toMatchObject({ role: 'user', content: scriptPrompt(ACCEPTANCE_STEPS) })
    expect(events[2]).toMatchObject({ content: 'plan the listing' })
    expect(events[4]).toMatchObject({ tool: 'exec_command', command: "/bin/bash -lc 'ls / | head -3'" })
    expect(events[5]).toMatchObject({ callId: events[4]!.callId, success: true, exitCode: 0 })
    expect(events[7]).toMatchObject({ callId: events[6]!.callId, success: false, exitCode: 1 })
    expect(events[10]).toMatchObject({ role: 'assistant', content: 'all done' })
    expect(outcome).toMatchObject({
      answerText: 'all done',
      error: null,
      toolCalls: 3,
      toolErrors: 1,
      capture: 'complete',
      model: 'scripted',
      harnessVersion: '0.169.0',
    })
    threadId = outcome.resumeId!
    // Usage is the gateway's count of the turn's four model calls.
    const metered = lab.usageOf(session).reduce((sum, u) => sum + u.input, 0)
    expect(outcome.usage!.input).toBe(metered)
    // effort and speed reach the model request (fast is OpenAI's priority tier).
    expect(lab.requestsOf(session)[0]!.body).toMatchObject({ reasoning: { effort: 'low' }, service_tier: 'priority' })
  })

  test('a follow-up turn resumes the thread, and its usage is the turn’s, not the thread’s', async () => {
    const sent = lab.requestsOf(session).length
    const metered = lab.usageOf(session)
    // What the first turn reported, as the runtime sums it from the stored usage events.
    const priorUsage = {
      input: metered.reduce((s, u) => s + u.input, 0),
      output: metered.reduce((s, u) => s + u.output, 0),
      cacheRead: 0,
      cacheWrite: 0,
      reasoning: 0,
    }
    const { outcome, events } = await lab.runTurn(codexAdapter, session, 'And now?', { resumeId: threadId, priorUsage })
    expect(outcome).toMatchObject({ answerText: 'Done: And now?', resumeId: threadId, error: null })
    const followUp = lab.requestsOf(session).slice(sent)
    expect(followUp).toHaveLength(1)
    const history = JSON.stringify(followUp[0]!.body.input)
    expect(history).toContain('ls / | head -3')
    expect(history).toContain('all done')
    expect(history).toContain('And now?')
    const turnUsage = lab.usageOf(session).slice(metered.length)
    expect(events.find((e) => e.type === 'usage')).toMatchObject({ inputTokens: turnUsage[0]!.input, outputTokens: turnUsage[0]!.output })
  })

  test('a fail step fails the turn with the model’s message', async () => {
    const { outcome, events, exitCode } = await lab.runTurn(
      codexAdapter,
      lab.newSession(),
      scriptPrompt([{ say: 'trying' }, { fail: 'boom' }]),
    )
    expect(exitCode).toBe(1)
    expect(outcome).toMatchObject({ error: 'boom', answerText: null, capture: 'complete' })
    expect(events.at(-1)).toMatchObject({ type: 'result', success: false })
    expect(events.filter((e) => e.type === 'error').map((e) => e.content)).toContain('boom')
  })

  test('--output-schema: the gateway enforces it and the answer is the structured object', async () => {
    const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false }
    const s = lab.newSession()
    const { outcome } = await lab.runTurn(codexAdapter, s, scriptPrompt([{ structured: { n: 7 } }]), { outputSchema: schema })
    expect(outcome).toMatchObject({ error: null, structured: { n: 7 }, answerText: '{"n":7}' })
    expect(lab.requestsOf(s)[0]!.body.text.format).toMatchObject({ type: 'json_schema', strict: true, schema })
  })
})
