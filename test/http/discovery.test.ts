import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { loadCatalog } from '../../src/catalog/catalog'
import { ConfigError } from '../../src/config'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
})
afterAll(() => t[Symbol.asyncDispose]())

const available = (query = '', token = t.admin.token) => t.app.handle(req('GET', `/o/acme/agents/available${query}`, { token }))

describe('GET /o/{org}/agents/available', () => {
  test('lists the three harnesses, the scripted model for each, and a stable catalog revision', async () => {
    const res = await available()
    expect(res.status).toBe(200)
    const body = await json(res)
    expect(body.harnesses.map((h: { id: string }) => h.id)).toEqual(['harness_1', 'harness_2', 'harness_3'])
    expect(body.catalog_revision).toMatch(/^[0-9a-f]{16}$/)
    expect(body.checked_at).toMatch(/^\d{4}-/)
    const scripted = body.models.find((m: { id: string }) => m.id === 'scripted')
    expect(scripted).toEqual({
      id: 'scripted',
      display_name: expect.any(String),
      provider: 'local',
      type: 'scripted',
      harnesses: ['harness_1', 'harness_2', 'harness_3'],
      pricing: { input_per_million: 0, output_per_million: 0 },
      effort: ['low', 'medium', 'high'],
      modes: ['fast'],
    })
    expect(
      body.models.some(
        (m: { provider: string; pricing: { input_per_million: number } }) => m.provider === 'anthropic' && m.pricing.input_per_million > 0,
      ),
    ).toBe(true)
    expect(body.mcp_servers).toEqual([])
    expect(body.mcp_categories).toEqual([])
    expect(body.plugins.marketplaces).toEqual([])
    expect(typeof body.plugins.catalog.expires_at).toBe('number')
    expect((await json(await available())).catalog_revision).toBe(body.catalog_revision)
  })

  test('harness rows: installed CLI version, models with effort and speed, capabilities', async () => {
    const body = await json(await available())
    const claude = body.harnesses[0]
    expect(claude.runtime.latest_verified).toMatchObject({ id: '2.1.197', available: true, pin_guarantee: true, image_digest: null })
    expect(claude.runtime.pinned).toEqual({ available: true })
    const scripted = claude.models.find((m: { id: string }) => m.id === 'scripted')
    expect(scripted.speed).toEqual([
      { id: 'standard', available: true },
      { id: 'fast', available: true },
    ])
    const gemini = body.harnesses[2]
    expect(gemini.models.find((m: { id: string }) => m.id === 'scripted').speed).toContainEqual({ id: 'fast', available: false })
    // What a run can have: a Project's network allow list and a saved agent's instructions; the rest says why not.
    for (const harness of body.harnesses) {
      expect(Object.keys(harness.capabilities).sort()).toEqual(
        ['browser', 'computer', 'tools_selected', 'network_allowlist', 'instructions', 'configuration'].sort(),
      )
      for (const [key, capability] of Object.entries<{ available: boolean; disabled_reason?: string }>(harness.capabilities)) {
        expect({ key, available: capability.available }).toEqual({ key, available: key === 'network_allowlist' || key === 'instructions' })
        if (!capability.available) expect(capability.disabled_reason?.length).toBeGreaterThan(20)
        else expect(capability.disabled_reason).toBeUndefined()
      }
    }
    expect(claude.suggested_setups[0].defaults.model).toEqual({ selection: 'fixed', id: 'scripted' })
    expect(claude.native_tools.length).toBeGreaterThan(0)
  })

  test('?harness restricts the harness list; an unknown harness is 400', async () => {
    const body = await json(await available('?harness=harness_2'))
    expect(body.harnesses.map((h: { id: string }) => h.id)).toEqual(['harness_2'])
    expect((await available('?harness=harness_7')).status).toBe(400)
  })

  test('401 without a token; 404 for a non-member', async () => {
    expect((await t.app.handle(req('GET', '/o/acme/agents/available'))).status).toBe(401)
    t.identity.createOrg('solo')
    const outsider = t.identity.createUser('solo', 'solo@solo.test', 'admin')
    expect((await available('', outsider.token)).status).toBe(404)
  })
})

describe('catalog from the config file', () => {
  test('models, connectors and marketplaces are added; the revision changes', async () => {
    const base = await json(await available())
    const file = join(t.dir, 'agentd.json')
    writeFileSync(
      file,
      JSON.stringify({
        catalog: {
          models: [
            {
              id: 'local-llama',
              display_name: 'Llama',
              provider: 'local',
              type: 'chat',
              harnesses: ['harness_2'],
              pricing: { input_per_million: 0.1, output_per_million: 0.2 },
              effort: ['low'],
              modes: [],
            },
          ],
          mcp_servers: [
            {
              name: 'linear',
              slug: 'linear',
              title: 'Linear',
              description: 'Issues',
              category: 'project-management',
              tags: [],
              verified: true,
              official: true,
              author: 'Linear',
              remotes: [{ type: 'streamable-http', url: 'https://mcp.linear.app/mcp' }],
              documentationUrl: 'https://linear.app',
              oauth: true,
            },
          ],
          plugins: { marketplaces: [{ name: 'team', source: 'https://example.com/marketplace.json' }] },
        },
      }),
    )
    await using custom = await makeTestApp({ AGENTD_CONFIG: file })
    const body = await json(await custom.app.handle(req('GET', '/o/acme/agents/available', { token: custom.admin.token })))
    expect(body.models.map((m: { id: string }) => m.id)).toContain('local-llama')
    expect(body.mcp_servers[0].slug).toBe('linear')
    expect(body.mcp_categories).toEqual([{ name: 'project-management', count: 1 }])
    expect(body.plugins.marketplaces).toEqual([{ name: 'team', source: 'https://example.com/marketplace.json' }])
    expect(body.catalog_revision).not.toBe(base.catalog_revision)
    // The create rules follow the configured catalog.
    const created = await custom.app.handle(
      req('POST', '/o/acme/p/_/sessions', { token: custom.admin.token, body: { agent: 'harness_1', prompt: 'x', model: 'local-llama' } }),
    )
    expect(created.status).toBe(422)
  })
})

describe('the catalog in AGENTD_CONFIG', () => {
  const model = {
    id: 'm',
    display_name: 'M',
    provider: 'local',
    type: 'chat',
    harnesses: ['harness_2'],
    pricing: { input_per_million: 1, output_per_million: 2 },
    effort: [],
    modes: [],
  }
  const load = (catalog: unknown) => {
    const file = join(t.dir, 'catalog.json')
    writeFileSync(file, JSON.stringify({ catalog }))
    return loadCatalog(file)
  }

  test('a mistake stops the start with the field it is in', () => {
    const cases: [unknown, string][] = [
      [{ models: {} }, 'AGENTD_CONFIG catalog.models: Expected array'],
      [{ models: [{ ...model, harnesses: ['harness_9'] }] }, 'AGENTD_CONFIG catalog.models.0.harnesses.0:'],
      [
        { models: [{ ...model, pricing: { input_per_million: -1, output_per_million: 0 } }] },
        'AGENTD_CONFIG catalog.models.0.pricing.input_per_million:',
      ],
      [{ models: [{ ...model, id: undefined }] }, 'AGENTD_CONFIG catalog.models.0.id:'],
      [{ plugins: { marketplaces: [{ name: 'team' }] } }, 'AGENTD_CONFIG catalog.plugins.marketplaces.0.source:'],
    ]
    for (const [catalog, message] of cases) {
      expect(() => load(catalog)).toThrow(ConfigError)
      expect(() => load(catalog)).toThrow(message)
    }
  })

  test('a well-formed row replaces the built-in one with its id', () => {
    const catalog = load({ models: [{ ...model, id: 'scripted', display_name: 'Mine' }] })
    expect(catalog.models.filter((m) => m.id === 'scripted') as unknown[]).toEqual([{ ...model, id: 'scripted', display_name: 'Mine' }])
    expect(catalog.models.length).toBe(load({}).models.length)
  })
})
