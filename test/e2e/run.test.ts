import { removeDataDir } from '../helpers/cleanup'
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { script, waitFor } from '../helpers/http'
import { client, seededDataDir, startServer, type RunningServer } from '../helpers/server'
import { settled } from '../helpers/sessions'

/**
 * The newcomer's path, on real parts: the admin CLI as a process, the server as a process with
 * the default (strongest available) sandbox driver, and the real Claude Code CLI against the
 * scripted model.
 */
let dir: string
let server: RunningServer
let call: ReturnType<typeof client>

beforeAll(async () => {
  const seeded = await seededDataDir('agentd-e2e')
  dir = seeded.dir
  server = await startServer({ DATA_DIR: dir })
  call = client(() => server, seeded.token)
})
afterAll(async () => {
  await server.stop()
  await removeDataDir(dir) // with the sandbox disks the stopped server left mounted
})

async function runToEnd(body: Record<string, unknown>) {
  const created = await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', ...body })
  expect(created.status).toBe(202)
  const id = created.body.execution_id as string
  const session = await settled(async () => (await call('GET', `/o/acme/p/_/sessions/${id}`)).body, { timeoutMs: 30_000 })
  const result = (await call('GET', `/o/acme/p/_/sessions/${id}/result`)).body
  return { id, session, result }
}

const schema = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'], additionalProperties: false }

describe('a harness_1 run end to end', () => {
  test('the server picked a real sandbox driver and said so', () => {
    expect(server.log()).toMatch(/sandbox driver (bwrap|gvisor)/)
  })

  test('bash then answer: completed, answer "ok", hi.txt in the workspace, tokens counted', async () => {
    const { id, session, result } = await runToEnd({ prompt: script([{ bash: 'echo hi > hi.txt' }, { answer: 'ok' }]) })
    expect(session.status).toBe('completed')
    expect(result.result).toEqual({ text: 'ok', structured: null, schema_valid: null })
    expect(result.output).toBe('completed in 1 turn')
    expect(readFileSync(join(dir, 'sandboxes', id, 'workspace', 'hi.txt'), 'utf8')).toBe('hi\n')
    expect(session.input_tokens).toBeGreaterThan(0)
    expect(session.output_tokens).toBeGreaterThan(0)
    expect(session.total_tokens).toBe(session.input_tokens + session.cache_write_tokens + session.output_tokens)
    expect(session.total_cost_usd).toBe(0)
    expect(session.turns_count).toBe(1)
    expect(session.tool_calls_count).toBe(1)
    expect(session.tool_errors_count).toBe(0)
    expect(session.model).toBe('scripted')
    expect(session.summary).toBe('ok')
    expect(session.session_capture).toBe('complete')
    expect(session.machine_state).toBe('paused')
    expect(session.effective_config).toEqual({ harness_version: '2.1.197' })
  })

  test('a failing model ends the session failed with the message in error', async () => {
    const { session, result } = await runToEnd({ prompt: script([{ fail: 'boom' }]) })
    expect(session.status).toBe('failed')
    expect(session.error).toContain('boom')
    expect(result.output).toContain('boom')
  })

  test('output_schema with a conforming structured answer: completed, schema_valid true', async () => {
    const { session, result } = await runToEnd({ prompt: script([{ structured: { n: 7 } }]), output_schema: schema })
    expect(session.status).toBe('completed')
    expect(result.result.structured).toEqual({ n: 7 })
    expect(result.result.schema_valid).toBe(true)
  })

  test('output_schema with a non-conforming answer: needs_review, schema_valid false', async () => {
    const { session, result } = await runToEnd({ prompt: script([{ answer: 'no object for you' }]), output_schema: schema })
    expect(session.status).toBe('needs_review')
    expect(result.result.schema_valid).toBe(false)
  })

  test('an ephemeral run is torn down when its turn ends', async () => {
    const { id, session } = await runToEnd({ prompt: 'hello', persistence: 'ephemeral' })
    expect(session.status).toBe('completed')
    expect(session.machine_state).toBe('stopped')
    // The sandbox goes right after the status is committed.
    await waitFor(
      async () => existsSync(join(dir, 'sandboxes', id)),
      (exists) => !exists,
      10_000,
    )
  })
})
