/**
 * `<harness>@<version>` (spec section 9): another published version of a CLI is installed from
 * npm into DATA_DIR once, shared by the sessions that pin it, and reported as requested/resolved.
 * These tests reach the npm registry, as `npm install` does.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { HarnessInstaller } from '../../src/runtime/harness-install'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script } from '../helpers/http'
import { settled } from '../helpers/sessions'

/** A published Gemini CLI release older than the bundled 0.61.0. */
const OLDER = '0.60.0'
let t: TestApp

beforeAll(async () => {
  t = await makeTestApp()
  t.plans.setPlan('acme', { maxConcurrent: 10 })
})
afterAll(() => t[Symbol.asyncDispose]())

const create = (agent: string, prompt = script([{ bash: 'false' }, { answer: 'pinned ok' }])) =>
  t.app.handle(req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent, prompt } }))
const settledRun = (id: string) =>
  settled(() => t.app.handle(req('GET', `/o/acme/p/_/sessions/${id}`, { token: t.admin.token })).then(json), { timeoutMs: 90_000 })

describe('pinning harness_3 to an older published version', () => {
  test('installs it once into DATA_DIR, shares it, runs it and reports both versions', async () => {
    // Two sessions pin the same version at once: one install serves both.
    const [a, b] = await Promise.all([create(`harness_3@${OLDER}`), create(`harness_3@${OLDER}`)])
    expect(a.status).toBe(202)
    expect(b.status).toBe(202)
    const created = await json(a)
    expect(created).toMatchObject({ agent: `harness_3@${OLDER}`, harness_version_requested: OLDER, harness_version_resolved: OLDER })
    const [first, second] = await Promise.all([settledRun(created.execution_id), settledRun((await json(b)).execution_id)])
    for (const session of [first, second]) {
      expect(session).toMatchObject({
        status: 'completed',
        harness_version_requested: OLDER,
        harness_version_resolved: OLDER,
        tool_errors_count: 1,
      })
      expect(session.effective_config.harness_version).toBe(OLDER)
    }
    const cache = join(t.dir, 'harnesses')
    expect(readdirSync(cache)).toEqual([`@google+gemini-cli@${OLDER}`])
    const manifest = JSON.parse(
      readFileSync(join(cache, `@google+gemini-cli@${OLDER}`, 'node_modules/@google/gemini-cli/package.json'), 'utf8'),
    )
    expect(manifest.version).toBe(OLDER)
  }, 120_000)

  test('a version npm does not have is 422 UNSUPPORTED_AGENT with a clear message', async () => {
    const res = await create('harness_3@99.0.0')
    expect(res.status).toBe(422)
    const body = await json(res)
    expect(body.error_code).toBe('UNSUPPORTED_AGENT')
    expect(body.error).toBe('harness_3@99.0.0: @google/gemini-cli has no published version "99.0.0"')
  })

  test('a pin that is not a version or dist-tag is refused without asking npm', async () => {
    for (const agent of ['harness_3@../../etc', 'harness_2@https://example.com/x.tgz', 'harness_1@ 1']) {
      const res = await create(agent)
      expect(res.status).toBe(422)
      expect((await json(res)).error).toContain('is not a version or dist-tag')
    }
  })

  test('the bundled version pinned explicitly needs no install', async () => {
    const installer = new HarnessInstaller(join(t.dir, 'harnesses-unused'))
    expect(await installer.resolve('harness_2@0.169.0', '@openai/codex', '0.169.0')).toBe('0.169.0')
    expect(await installer.modulesFor('@openai/codex', '0.169.0')).toEndWith('node_modules')
    expect(readdirSync(join(t.dir, 'harnesses-unused'))).toEqual([])
    // A dist-tag resolves to the exact version it names today.
    expect(await installer.resolve('harness_3@latest', '@google/gemini-cli', 'latest')).toMatch(/^\d+\.\d+\.\d+/)
  })
})
