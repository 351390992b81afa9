import { afterAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { admin } from '../helpers/server'

const dir = mkdtempSync(join(tmpdir(), 'agentd-admin-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('npm run admin', () => {
  test('org, user, token, project and plan commands print one JSON object and exit 0', async () => {
    const org = await admin(dir, 'org', 'create', 'acme')
    expect(org.code).toBe(0)
    expect(org.json).toEqual({ id: expect.stringMatching(/^[0-9a-f-]{36}$/), slug: 'acme' })

    const user = await admin(dir, 'user', 'create', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'admin')
    expect(user.code).toBe(0)
    expect(user.json).toEqual({ id: expect.any(String), email: 'ada@acme.test', role: 'admin', token: expect.stringMatching(/^agt_/) })

    const token = await admin(dir, 'user', 'token', '--email', 'ada@acme.test')
    expect(token.json.token).toMatch(/^agt_/)
    expect(token.json.token).not.toBe(user.json.token)

    const project = await admin(dir, 'project', 'create', '--org', 'acme', '--name', 'web', '--repo', 'https://github.com/acme/web.git')
    expect(project.json).toEqual({ id: expect.any(String), name: 'web' })
    // Without a GitHub App its runs would be 403 INSTALLATION_NOT_LINKED: the operator unbinds it.
    const unbound = await admin(dir, 'project', 'unbind', '--org', 'acme', '--name', 'web')
    expect(unbound.json).toEqual({ id: project.json.id, name: 'web', repository: null })
    expect((await admin(dir, 'project', 'unbind', '--org', 'acme', '--name', 'nope')).code).not.toBe(0)

    const plan = await admin(
      dir,
      'plan',
      'set',
      '--org',
      'acme',
      '--max-concurrent',
      '3',
      '--spend-cap-usd',
      '12.5',
      '--payment-method',
      'card',
    )
    expect(plan.json).toMatchObject({ org: 'acme', max_concurrent: 3, spend_cap_usd: 12.5, payment_method: 'card', token_limit: null })
    // A second `plan set` changes only what it names.
    const again = await admin(dir, 'plan', 'set', '--org', 'acme', '--token-limit', '1000')
    expect(again.json).toMatchObject({ max_concurrent: 3, token_limit: 1000 })
    // "none" removes a limit; `plan clear` leaves the org with no plan, and `plan set` gives it one again.
    expect((await admin(dir, 'plan', 'set', '--org', 'acme', '--token-limit', 'none', '--spend-cap-usd', 'none')).json).toMatchObject({
      token_limit: null,
      spend_cap_usd: null,
      max_concurrent: 3,
    })
    expect((await admin(dir, 'plan', 'clear', '--org', 'acme')).json).toEqual({ org: 'acme', plan: null })
    expect((await admin(dir, 'plan', 'set', '--org', 'acme', '--compute-minutes', '60')).json).toMatchObject({
      compute_minutes: 60,
      max_concurrent: null,
    })
  })

  test('errors go to stderr with a non-zero exit', async () => {
    const cases: string[][] = [
      ['org', 'create', 'Not A Slug'],
      ['org', 'create', 'acme'],
      ['user', 'create', '--org', 'nope', '--email', 'x@y.z', '--role', 'admin'],
      ['user', 'create', '--org', 'acme', '--email', 'x@y.z', '--role', 'owner'],
      ['user', 'create', '--org', 'acme', '--email', 'not-an-email', '--role', 'admin'],
      ['user', 'token', '--email', 'ghost@acme.test'],
      ['project', 'create', '--org', 'acme', '--name', 'web'],
      ['project', 'create', '--org', 'acme', '--name', 'site', '--repo', 'not a repo'],
      ['plan', 'set', '--org', 'acme', '--max-concurrent', 'many'],
      ['plan', 'set', '--org', 'acme', '--payment-method', 'cash'],
      ['plan', 'clear', '--org', 'nope'],
      ['plan', 'clear'],
      ['user', 'create', '--org', 'acme'],
      ['frobnicate'],
      ['org', 'create', 'x', '--bogus-flag'],
    ]
    for (const args of cases) {
      const result = await admin(dir, ...args)
      expect(result.code, args.join(' ')).not.toBe(0)
      expect(result.stderr, args.join(' ')).toContain('agentd admin:')
    }
  })
})
