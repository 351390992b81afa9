import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../../sandbox/process'
import { loadConfig } from '../../src/config'
import { sandboxScope, startServices } from '../../src/server'
import { sweepScope } from '../helpers/cleanup'
import { req, script, waitFor } from '../helpers/http'

/**
 * Saved agents (spec 4.1 `agent_id`, 2.2 `profile_*`, `effective`, `snapshot`), through the HTTP
 * API of a real agentd: the revision flow, a run pinned to a revision, and a catalog change
 * between two starts of the server on the same DATA_DIR (409 CATALOG_REFRESH_REQUIRED until the
 * agent is reviewed again).
 */

type Services = Awaited<ReturnType<typeof startServices>>
let dir: string
let services: Services
let driver: ProcessDriver
let admin: { token: string }
let member: { token: string }
let keySecret: string

async function start(env: Record<string, string> = {}) {
  services = await startServices(loadConfig({ DATA_DIR: dir, ...env }), { driver, log: () => {} })
  await services.ready
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentd-agents-'))
  driver = new ProcessDriver({ scope: sandboxScope(dir) })
  await start()
  services.identity.createOrg('acme')
  services.identity.createOrg('other')
  admin = services.identity.createUser('acme', 'admin@acme.test', 'admin')
  member = services.identity.createUser('acme', 'member@acme.test', 'member')
  keySecret = (await call('POST', '/o/acme/api-keys', admin.token, { name: 'ci' })).body.secret
})
afterAll(async () => {
  await services?.close()
  await sweepScope(driver)
  rmSync(dir, { recursive: true, force: true })
})

async function call(method: string, path: string, token: string, body?: unknown) {
  const res = await services.app.handle(req(method, path, { token, body }))
  const text = await res.text()
  return { status: res.status, body: text ? JSON.parse(text) : null }
}

/** A model the operator adds in the config file's catalog (and later removes). */
const HOUSE_MODEL = {
  id: 'house-model',
  display_name: 'House model',
  provider: 'local',
  type: 'scripted',
  harnesses: ['harness_2'],
  pricing: { input_per_million: 0, output_per_million: 0 },
  effort: ['low'],
  modes: [],
  mode_harnesses: [],
}

const catalogRevision = async () => (await call('GET', '/o/acme/agents/available', admin.token)).body.catalog_revision as string

describe('saved agents', () => {
  test('create, change and review: each change of configuration is a revision with its digest; a rename is not', async () => {
    const created = await call('POST', '/o/acme/agents', member.token, {
      name: 'reviewer',
      harness: 'harness_2',
      effort: 'low',
      instructions: 'Be brief.',
    })
    expect(created.status).toBe(201)
    const revision = await catalogRevision()
    expect(created.body).toMatchObject({
      name: 'reviewer',
      revision: 1,
      harness: 'harness_2',
      model: null,
      effort: 'low',
      speed: null,
      instructions: 'Be brief.',
      skills: [],
      connections: [],
      catalog_revision: revision,
      catalog_current: true,
    })
    expect(created.body.id).toMatch(/^agent_[0-9a-f]{24}$/)
    expect(created.body.digest).toMatch(/^[0-9a-f]{64}$/)
    const id = created.body.id

    const changed = await call('PATCH', `/o/acme/agents/${id}`, admin.token, { effort: 'high' })
    expect(changed.status).toBe(200)
    expect(changed.body).toMatchObject({ revision: 2, effort: 'high', instructions: 'Be brief.' })
    expect(changed.body.digest).not.toBe(created.body.digest)
    // The same configuration again, a rename, and a review against an unchanged catalog make no revision.
    expect((await call('PATCH', `/o/acme/agents/${id}`, admin.token, { effort: 'high', name: 'critic', review: true })).body).toMatchObject(
      { revision: 2, name: 'critic', digest: changed.body.digest },
    )
    const revisions = await call('GET', `/o/acme/agents/${id}/revisions`, member.token)
    expect(
      revisions.body.data.map((r: { revision: number; digest: string; config: { effort: string } }) => [
        r.revision,
        r.digest,
        r.config.effort,
      ]),
    ).toEqual([
      [2, changed.body.digest, 'high'],
      [1, created.body.digest, 'low'],
    ])
    expect((await call('GET', '/o/acme/agents', member.token)).body.data.map((a: { id: string }) => a.id)).toContain(id)
  })

  test('bad setups are refused as a create would refuse them; other orgs and API keys see nothing', async () => {
    const bad: [unknown, number, string | undefined][] = [
      [{ name: 'x', harness: 'harness_2', model: 'no-such-model' }, 422, 'MODEL_UNSUPPORTED'],
      [{ name: 'x', harness: 'harness_2', effort: 'max' }, 400, 'VALIDATION_ERROR'],
      [{ name: 'x', harness: 'harness_3', speed: 'fast' }, 400, 'VALIDATION_ERROR'],
      [{ name: 'x', harness: 'harness_2', skills: ['https://example.com/notes.txt'] }, 422, 'SKILL_INVALID'],
      [{ name: 'x', harness: 'harness_2', connections: [123] }, 400, 'VALIDATION_ERROR'],
      [{ name: 'x', harness: 'harness_9' }, 400, 'VALIDATION_ERROR'],
      [{ name: '', harness: 'harness_2' }, 400, 'VALIDATION_ERROR'],
      [{ name: 'x', harness: 'harness_2', extra: 1 }, 400, 'VALIDATION_ERROR'],
    ]
    for (const [body, status, code] of bad) {
      const answer = await call('POST', '/o/acme/agents', admin.token, body)
      expect({ body, status: answer.status, code: answer.body.code ?? answer.body.error_code }).toEqual({ body, status, code })
    }
    const id = (await call('POST', '/o/acme/agents', admin.token, { name: 'mine', harness: 'harness_2' })).body.id
    const stranger = services.identity.createUser('other', 'admin@other.test', 'admin')
    expect((await call('GET', `/o/other/agents/${id}`, stranger.token)).status).toBe(404)
    expect((await call('GET', `/o/acme/agents/${id}`, keySecret)).status).toBe(401)
    expect((await call('GET', '/o/acme/agents/agent_nope', admin.token)).status).toBe(404)
    expect((await call('PATCH', `/o/acme/agents/${id}`, admin.token, { model: 'no-such-model' })).status).toBe(422)
  })

  test('a run of a saved agent is pinned to its revision: profile fields, snapshot, overrides and effective; its instructions reach the CLI', async () => {
    // The instructions carry the scripted model's script: the run can only follow it if they reached the prompt.
    const instructions = script([{ bash: 'echo instructed' }, { answer: 'followed the instructions' }])
    const agent = (
      await call('POST', '/o/acme/agents', admin.token, { name: 'scripted', harness: 'harness_2', effort: 'low', instructions })
    ).body
    const created = await call('POST', '/o/acme/p/_/sessions', admin.token, { input: 'Say hello.', agent_id: agent.id, effort: 'medium' })
    expect(created.status).toBe(202)
    expect(created.body).toMatchObject({
      agent: 'harness_2',
      prompt: 'Say hello.',
      profile_id: agent.id,
      profile_revision: 1,
      profile_digest: agent.digest,
      agent_profile: { id: agent.id, name: 'scripted' },
      snapshot: { harness: 'harness_2', effort: 'low', instructions, model: null, speed: null, skills: [], connections: [] },
      requested_overrides: { effort: 'medium' },
      effective: {
        model: created.body.model,
        effort: 'medium',
        speed: null,
        harness_version: created.body.harness_version_resolved,
        catalog_revision: await catalogRevision(),
        image_digest: null,
      },
    })
    const id = created.body.execution_id
    const done = await waitFor(
      async () => (await call('GET', `/o/acme/p/_/sessions/${id}`, admin.token)).body,
      (s) => !['queued', 'allocating', 'running'].includes(s.status),
      30_000,
    )
    expect(done.status).toBe('completed')
    expect((await call('GET', `/o/acme/p/_/sessions/${id}/result`, admin.token)).body.result.text).toBe('followed the instructions')
    // The agent's harness is the run's; an API key may not name a saved agent; an unknown one is 400.
    expect((await call('POST', '/o/acme/p/_/sessions', admin.token, { input: 'x', agent_id: agent.id, harness: 'harness_1' })).status).toBe(
      400,
    )
    expect((await call('POST', '/o/acme/p/_/sessions', keySecret, { input: 'x', agent_id: agent.id })).body.code).toBe(
      'API_KEY_FIELD_UNSUPPORTED',
    )
    expect((await call('POST', '/o/acme/p/_/sessions', admin.token, { input: 'x', agent_id: 'agent_nope' })).status).toBe(400)
    // A plain run reports no saved agent.
    const plain = await call('POST', '/o/acme/p/_/sessions', admin.token, { input: script([{ answer: 'plain' }]), harness: 'harness_2' })
    expect(plain.body).toMatchObject({
      profile_id: null,
      profile_revision: null,
      profile_digest: null,
      agent_profile: null,
      snapshot: null,
      effective: null,
    })
  })

  test('after a catalog change a run of an unreviewed agent is 409 CATALOG_REFRESH_REQUIRED; review: true makes a revision against the new catalog and runs start again', async () => {
    const agent = (await call('POST', '/o/acme/agents', admin.token, { name: 'pinned', harness: 'harness_2' })).body
    const before = await catalogRevision()
    // The operator adds a tool server to the catalog and restarts agentd on the same DATA_DIR.
    await services.close()
    const configFile = join(dir, 'agentd.json')
    writeFileSync(configFile, JSON.stringify({ catalog: { mcp_servers: [{ name: 'tickets', slug: 'tickets' }], models: [HOUSE_MODEL] } }))
    await start({ AGENTD_CONFIG: configFile })
    const after = await catalogRevision()
    expect(after).not.toBe(before)

    expect((await call('GET', `/o/acme/agents/${agent.id}`, admin.token)).body).toMatchObject({
      catalog_revision: before,
      catalog_current: false,
    })
    const refused = await call('POST', '/o/acme/p/_/sessions', admin.token, { input: script([{ answer: 'x' }]), agent_id: agent.id })
    expect({ status: refused.status, code: refused.body.code }).toEqual({ status: 409, code: 'CATALOG_REFRESH_REQUIRED' })

    const reviewed = await call('PATCH', `/o/acme/agents/${agent.id}`, admin.token, { review: true })
    expect(reviewed.body).toMatchObject({ revision: 2, digest: agent.digest, catalog_revision: after, catalog_current: true })
    const run = await call('POST', '/o/acme/p/_/sessions', admin.token, { input: script([{ answer: 'x' }]), agent_id: agent.id })
    expect(run.status).toBe(202)
    expect(run.body).toMatchObject({ profile_revision: 2, effective: { catalog_revision: after } })

    // An agent on a model the operator then takes out of the catalog: a rename still works (no
    // revision, nothing asked of the catalog); a review says the model is gone; runs stay refused.
    const house = (await call('POST', '/o/acme/agents', admin.token, { name: 'house', harness: 'harness_2', model: HOUSE_MODEL.id })).body
    expect(house.model).toBe(HOUSE_MODEL.id)
    await services.close()
    writeFileSync(configFile, JSON.stringify({ catalog: { mcp_servers: [{ name: 'tickets', slug: 'tickets' }] } }))
    await start({ AGENTD_CONFIG: configFile })
    expect((await call('PATCH', `/o/acme/agents/${house.id}`, admin.token, { name: 'house (old)' })).body).toMatchObject({
      name: 'house (old)',
      revision: 1,
      catalog_current: false,
    })
    const review = await call('PATCH', `/o/acme/agents/${house.id}`, admin.token, { review: true })
    expect({ status: review.status, code: review.body.error_code }).toEqual({ status: 422, code: 'MODEL_UNSUPPORTED' })
    expect((await call('POST', '/o/acme/p/_/sessions', admin.token, { input: 'x', agent_id: house.id })).body.code).toBe(
      'CATALOG_REFRESH_REQUIRED',
    )
  })
})
