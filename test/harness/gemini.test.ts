/** The real Gemini CLI against the scripted model (Gemini API over SSE), and its command line. */
import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { buildTurn, geminiAdapter, geminiEntryPath, shellOutput } from '../../src/harness/gemini'
import { PROMPT_FILE, withPromptOnStdin } from '../../src/harness/common'
import type { TurnSpec } from '../../src/harness/harness'
import { ACCEPTANCE_STEPS, scriptPrompt, startLab } from '../helpers/harness'

const lab = startLab('gemini')
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
  test('headless stream-json with the model named, debug on, the prompt on stdin', () => {
    const { argv, env, files } = buildTurn(spec)
    const wrapper = withPromptOnStdin('/home/agent', [])
    expect(argv.slice(0, wrapper.length)).toEqual(wrapper)
    expect(argv.slice(wrapper.length + 1)).toEqual([
      geminiEntryPath(),
      '--output-format',
      'stream-json',
      '--yolo',
      '--skip-trust',
      '--model',
      'scripted',
      '--debug',
    ])
    expect(argv[wrapper.length]).toMatch(/node$/)
    expect(files![PROMPT_FILE]).toBe('-starts with a dash')
    expect(existsSync(geminiEntryPath())).toBe(true)
    expect(env).toMatchObject({
      HOME: '/home/agent',
      GOOGLE_GEMINI_BASE_URL: 'http://127.0.0.1:9',
      GEMINI_API_KEY: 'secret',
      GEMINI_CLI_NO_RELAUNCH: 'true',
    })
    expect(JSON.parse(files!['.gemini/settings.json']!)).toEqual({
      security: { auth: { selectedType: 'gemini-api-key' } },
      general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
      privacy: { usageStatisticsEnabled: false },
      telemetry: { enabled: false },
    })
  })

  test('a follow-up resumes the session; effort becomes a thinking level; a pinned install is used', () => {
    const { argv, files } = buildTurn({ ...spec, resumeId: 'abc', effort: 'medium', cliRoot: '/cache/node_modules' })
    expect(argv).toContain(geminiEntryPath('/cache/node_modules'))
    expect(argv.slice(-2)).toEqual(['--resume', 'abc'])
    expect(JSON.parse(files!['.gemini/settings.json']!).modelConfigs).toEqual({
      customOverrides: [
        { match: { model: 'scripted' }, modelConfig: { generateContentConfig: { thinkingConfig: { thinkingLevel: 'MEDIUM' } } } },
      ],
    })
  })

  test('the shell tool’s debug report splits into output and exit code', () => {
    expect(shellOutput('Output: bin\nboot\nProcess Group PGID: 12')).toEqual({ output: 'bin\nboot', exitCode: 0 })
    expect(shellOutput('Output: (empty)\nExit Code: 1\nProcess Group PGID: 13')).toEqual({ output: '', exitCode: 1 })
    expect(
      shellOutput(
        "Output: ls: cannot access 'x'\nError: spawn failed\nExit Code: 2\nSignal: 9\nBackground PIDs: 4, 5\nProcess Group PGID: 3",
      ),
    ).toEqual({
      output: "ls: cannot access 'x'",
      exitCode: 2,
    })
    // Output that merely looks like a trailer stays output when the real trailer follows it.
    expect(shellOutput('Output: Exit Code: 5\nProcess Group PGID: 1')).toEqual({ output: 'Exit Code: 5', exitCode: 0 })
    expect(shellOutput('Command exited with code: 3')).toEqual({ output: '', exitCode: 3 })
    expect(shellOutput('plain text')).toEqual({ output: 'plain text', exitCode: 0 })
  })
})

describe('gemini CLI against the scripted model', () => {
  const session = lab.newSession()
  let sessionId = ''

  test('the acceptance script: events in order, chunks joined, a non-zero exit is a failure', async () => {
    const { events, outcome, exitCode } = await lab.runTurn(geminiAdapter, session, scriptPrompt(ACCEPTANCE_STEPS), { effort: 'low' })
    expect(exitCode).toBe(0)
    expect(readFileSync(join(session.workspace, 'notes/out.txt'), 'utf8')).toBe('written by the agent')
    // Gemini's stream-json has no thinking events.
    expect(events.map((e) => e.type)).toEqual([
      'init',
      'message',
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
    expect(events.every((e) => e.agent === 'harness_3')).toBe(true)
    expect(events[1]).toMatchObject({ role: 'user', content: scriptPrompt(ACCEPTANCE_STEPS) })
    expect(events[2]).toMatchObject({ role: 'assistant', content: 'Looking around' })
    expect(events[3]).toMatchObject({ tool: 'run_shell_command', command: 'ls / | head -3' })
    expect(events[4]).toMatchObject({ callId: events[3]!.callId, success: true, exitCode: 0 })
    expect(events[4]!.output!.split('\n')).toHaveLength(3)
    // The CLI reports `false` as status success; its exit code says otherwise.
    expect(events[6]).toMatchObject({ callId: events[5]!.callId, success: false, exitCode: 1, output: '' })
    expect(events[7]).toMatchObject({ tool: 'write_file', path: join(session.workspace, 'notes/out.txt') })
    expect(events[9]).toMatchObject({ role: 'assistant', content: 'all done' })
    expect(outcome).toMatchObject({
      answerText: 'all done',
      error: null,
      toolCalls: 3,
      toolErrors: 1,
      capture: 'complete',
      model: 'scripted',
      harnessVersion: '0.61.0',
    })
    expect(outcome.usage!.input).toBe(lab.usageOf(session).reduce((sum, u) => sum + u.input, 0))
    expect(lab.requestsOf(session)[0]!.body.generationConfig.thinkingConfig).toMatchObject({ thinkingLevel: 'LOW' })
    sessionId = outcome.resumeId!
  })

  test('a follow-up turn resumes the CLI’s session; the request carries the first turn', async () => {
    const sent = lab.requestsOf(session).length
    const { outcome } = await lab.runTurn(geminiAdapter, session, 'And now?', { resumeId: sessionId })
    expect(outcome).toMatchObject({ answerText: 'Done: And now?', resumeId: sessionId, error: null, capture: 'complete' })
    const followUp = lab
      .requestsOf(session)
      .slice(sent)
      .filter((r) => r.path.includes(':streamGenerateContent'))
    expect(followUp).toHaveLength(1)
    const history = JSON.stringify(followUp[0]!.body.contents)
    expect(history).toContain('ls / | head -3')
    expect(history).toContain('all done')
    expect(history).toContain('And now?')
  })

  test('a fail step fails the turn with the model’s message', async () => {
    const { outcome, events, exitCode } = await lab.runTurn(
      geminiAdapter,
      lab.newSession(),
      scriptPrompt([{ say: 'trying' }, { fail: 'boom' }]),
    )
    expect(exitCode).not.toBe(0)
    expect(outcome.error).toContain('boom')
    expect(outcome).toMatchObject({ answerText: null, capture: 'complete' })
    expect(events.at(-1)).toMatchObject({ type: 'result', success: false })
  })
})
