import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
})
afterAll(() => t[Symbol.asyncDispose]())

const create = (body: unknown, project = '_', token = t.admin.token) =>
  t.app.handle(req('POST', `/o/acme/p/${project}/sessions`, { token, body }))

// A long sleep keeps accepted runs from costing test time; they are killed when the app closes.
const idle = 'hello\n```agentd-script\n[{"sleep": 60000}]\n```'

async function expectError(res: Response, status: number, code?: string, field: 'code' | 'error_code' = 'code') {
  const body = await json(res)
  expect(res.status).toBe(status)
  expect(typeof body.error).toBe('string')
  if (code) expect(body[field]).toBe(code)
  return body
}

describe('POST /o/{org}/p/{project}/sessions (shape A)', () => {
  test('202 with a CloudRunSession for a valid body', async () => {
    const res = await create({ agent: 'harness_1', prompt: `Fix the bug\nin detail\n${idle}` })
    expect(res.status).toBe(202)
    const session = await json(res)
    expect(session.execution_id).toMatch(/^[0-9a-f-]{36}$/)
    expect(session.kind).toBe('cloud')
    expect(['queued', 'allocating', 'running']).toContain(session.status)
    expect(session.org_id).toBe(t.org.id)
    expect(session.project_id).toBeNull()
    expect(session.agent).toBe('harness_1')
    expect(session.persistence_mode).toBe('resumable')
    expect(session.model).toBe('scripted')
    expect(session.harness_version_resolved).toBe('2.1.197')
    expect(session.started_by).toEqual({ name: 'admin', avatar_url: null })
    expect(session.artifacts).toEqual([])
    expect(session.artifact_count).toBe(0)
    expect(session.created_at).toMatch(/^\d{4}-\d\d-\d\dT/)
  })

  test('a Project handle or id runs in that Project; agent defaults', async () => {
    for (const ref of ['web', t.project.id]) {
      const session = await json(await create({ prompt: idle }, ref))
      expect(session.project_id).toBe(t.project.id)
      expect(session.repo_owner).toBeNull()
      expect(session.agent).toBe('harness_1')
    }
  })

  test('a Project bound to a repository, on a server with no GitHub App, is 403 INSTALLATION_NOT_LINKED and nothing is made', async () => {
    const bound = t.identity.createProject('acme', 'bound', 'acme/bound')
    const before = t.store.countAll(['queued', 'allocating', 'running', 'completed', 'failed'])
    const body = await expectError(await create({ prompt: idle }, 'bound'), 403, 'INSTALLATION_NOT_LINKED')
    expect(body.error).toContain('acme/bound')
    await expectError(await create({ prompt: idle }, bound.id), 403, 'INSTALLATION_NOT_LINKED')
    expect(t.store.countAll(['queued', 'allocating', 'running', 'completed', 'failed'])).toBe(before)
    // Nor can such a Project be made over HTTP any more; one made before is unbound by the operator (test/admin/cli.test.ts).
    const made = await t.app.handle(
      req('POST', '/o/acme/projects', { token: t.admin.token, body: { name: 'later', repository: 'acme/later' } }),
    )
    expect(made.status).toBe(422)
    expect((await json(made)).code).toBe('INSTALLATION_NOT_LINKED')
  })

  test('an unknown Project is 404', async () => {
    await expectError(await create({ prompt: idle }, 'nope'), 404)
  })

  test('400 without a prompt, or with an empty one', async () => {
    await expectError(await create({ agent: 'harness_1' }), 400, 'VALIDATION_ERROR')
    await expectError(await create({ agent: 'harness_1', prompt: '  ' }), 400, 'VALIDATION_ERROR')
    await expectError(await create({ agent: 'harness_1', prompt: 42 }), 400, 'VALIDATION_ERROR')
  })

  test('a prompt over 256 KiB is 400; exactly 256 KiB is accepted', async () => {
    const limit = 256 * 1024
    await expectError(await create({ agent: 'harness_1', prompt: 'x'.repeat(limit + 1) }), 400, 'CONTENT_TOO_LARGE')
    expect((await create({ agent: 'harness_1', prompt: `${idle}${'x'.repeat(limit - idle.length)}` })).status).toBe(202)
  })

  test('a run without a Project (_) needs agent', async () => {
    const body = await expectError(await create({ prompt: idle }), 400, 'VALIDATION_ERROR')
    expect(body.error).toContain('agent')
  })

  test('unknown agent is 422 UNSUPPORTED_AGENT as error_code', async () => {
    await expectError(await create({ agent: 'harness_9', prompt: idle }), 422, 'UNSUPPORTED_AGENT', 'error_code')
  })

  test('a version pin of the bundled CLI is reported; requested and resolved', async () => {
    const session = await json(await create({ agent: 'harness_1@2.1.197', prompt: idle }))
    expect(session.harness_version_requested).toBe('2.1.197')
    expect(session.harness_version_resolved).toBe('2.1.197')
  })

  test('a model the catalog does not list for the harness is 422 MODEL_UNSUPPORTED as error_code', async () => {
    await expectError(await create({ agent: 'harness_1', prompt: idle, model: 'gpt-5.5' }), 422, 'MODEL_UNSUPPORTED', 'error_code')
    await expectError(await create({ agent: 'harness_1', prompt: idle, model: 'nope' }), 422, 'MODEL_UNSUPPORTED', 'error_code')
  })

  test('requested model, effort and speed are kept as requested_overrides', async () => {
    const session = await json(await create({ agent: 'harness_1', prompt: idle, model: 'scripted', effort: 'high', speed: 'fast' }))
    expect(session.requested_overrides).toEqual({ model: 'scripted', effort: 'high', speed: 'fast' })
  })

  test('unknown effort is 400; an effort the model row does not list is 400', async () => {
    await expectError(await create({ agent: 'harness_1', prompt: idle, effort: 'extreme' }), 400, 'VALIDATION_ERROR')
    const body = await expectError(await create({ agent: 'harness_1', prompt: idle, effort: 'max' }), 400, 'VALIDATION_ERROR')
    expect(body.error).toContain('max')
  })

  test('unknown speed is 400; fast where the model lists no fast mode is 400', async () => {
    await expectError(await create({ agent: 'harness_1', prompt: idle, speed: 'warp' }), 400, 'VALIDATION_ERROR')
    await expectError(
      await create({ agent: 'harness_1', prompt: idle, model: 'claude-sonnet-4-6', speed: 'fast' }),
      400,
      'VALIDATION_ERROR',
    )
  })

  test('harness_3 has no fast mode (400) and takes no output_schema (422 FIELD_UNSUPPORTED_FOR_HARNESS)', async () => {
    await expectError(await create({ agent: 'harness_3', prompt: idle, speed: 'fast' }), 400, 'VALIDATION_ERROR')
    const schema = { type: 'object', properties: {}, required: [], additionalProperties: false }
    await expectError(
      await create({ agent: 'harness_3', prompt: idle, output_schema: schema }),
      422,
      'FIELD_UNSUPPORTED_FOR_HARNESS',
      'error_code',
    )
  })

  test('unknown persistence or mode is 400; both are stored', async () => {
    await expectError(await create({ agent: 'harness_1', prompt: idle, persistence: 'forever' }), 400, 'VALIDATION_ERROR')
    await expectError(await create({ agent: 'harness_1', prompt: idle, mode: 'chatty' }), 400, 'VALIDATION_ERROR')
    const session = await json(await create({ agent: 'harness_1', prompt: idle, persistence: 'ephemeral', mode: 'interactive' }))
    expect(session.persistence_mode).toBe('ephemeral')
  })

  test('base_branch with on_pr is 400; on_pr must be at least 1', async () => {
    await expectError(await create({ agent: 'harness_1', prompt: idle, base_branch: 'main', on_pr: 3 }), 400, 'VALIDATION_ERROR')
    await expectError(await create({ agent: 'harness_1', prompt: idle, on_pr: 0 }), 400, 'VALIDATION_ERROR')
    const session = await json(await create({ agent: 'harness_1', prompt: idle, base_branch: 'develop' }))
    expect(session.branch).toBe('develop')
  })

  test('an account_id naming none of the caller’s accounts is 404 and makes nothing (accounts.test.ts has the rest)', async () => {
    const body = await expectError(await create({ agent: 'harness_1', prompt: idle, account_id: 'acct_1' }), 404)
    expect(body.error).toBe('Account not found')
  })

  describe('output_schema', () => {
    const ok = {
      type: 'object',
      properties: { n: { type: 'integer' }, note: { type: ['string', 'null'] } },
      required: ['n', 'note'],
      additionalProperties: false,
    }

    test('a conforming schema is accepted', async () => {
      expect((await create({ agent: 'harness_1', prompt: idle, output_schema: ok })).status).toBe(202)
    })

    const invalid: [string, unknown][] = [
      ['root not an object type', { type: 'array', items: { type: 'string' } }],
      ['a property missing from required', { ...ok, required: ['n'] }],
      ['additionalProperties not false', { ...ok, additionalProperties: true }],
      [
        'a nested object without additionalProperties',
        {
          ...ok,
          properties: { ...ok.properties, inner: { type: 'object', properties: {}, required: [] } },
          required: ['n', 'note', 'inner'],
        },
      ],
      ['a $ref outside the document', { ...ok, properties: { n: { $ref: 'https://example.com/schema.json' }, note: ok.properties.note } }],
      ['not a valid JSON Schema', { ...ok, properties: { n: { type: 'integer', minimum: 'five' }, note: ok.properties.note } }],
    ]
    for (const [name, schema] of invalid) {
      test(`400 OUTPUT_SCHEMA_INVALID: ${name}`, async () => {
        await expectError(await create({ agent: 'harness_1', prompt: idle, output_schema: schema }), 400, 'OUTPUT_SCHEMA_INVALID')
      })
    }

    test('400 OUTPUT_SCHEMA_INVALID: deeper than 10 levels; 10 levels are fine', async () => {
      const nest = (levels: number): Record<string, unknown> =>
        levels === 1
          ? { type: 'object', properties: {}, required: [], additionalProperties: false }
          : { type: 'object', properties: { a: nest(levels - 1) }, required: ['a'], additionalProperties: false }
      expect((await create({ agent: 'harness_1', prompt: idle, output_schema: nest(10) })).status).toBe(202)
      await expectError(await create({ agent: 'harness_1', prompt: idle, output_schema: nest(11) }), 400, 'OUTPUT_SCHEMA_INVALID')
    })

    test('400 OUTPUT_SCHEMA_INVALID: over 64 KiB', async () => {
      const big = { ...ok, description: 'x'.repeat(64 * 1024) }
      await expectError(await create({ agent: 'harness_1', prompt: idle, output_schema: big }), 400, 'OUTPUT_SCHEMA_INVALID')
    })

    test('an output_schema that is not an object is 400', async () => {
      await expectError(await create({ agent: 'harness_1', prompt: idle, output_schema: 'yes' }), 400, 'VALIDATION_ERROR')
      await expectError(await create({ agent: 'harness_1', prompt: idle, output_schema: [1] }), 400)
    })
  })

  test('a malformed JSON body is 400, never 500', async () => {
    const res = await t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: '{"prompt": ' }))
    await expectError(res, 400, 'VALIDATION_ERROR')
  })

  test('members may start sessions too', async () => {
    expect((await create({ agent: 'harness_1', prompt: idle }, '_', t.member.token)).status).toBe(202)
  })
})
