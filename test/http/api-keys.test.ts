import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeKeyApp, type KeyApp } from '../helpers/keys'
import { req, script } from '../helpers/http'
import { settled } from '../helpers/sessions'

// DNS for webhook URLs: fixed answers, so no test depends on the network.
const DNS: Record<string, string[]> = {
  'hooks.example.com': ['93.184.216.34'],
  'other.example.com': ['2606:2800:220:1:248:1893:25c8:1946'],
  'loop.example.com': ['127.0.0.1'],
  'ten.example.com': ['10.0.0.1'],
  'metadata.example.com': ['169.254.169.254'],
  'six.example.com': ['::1'],
}

let t: KeyApp
let offset = 0 // moves this app's clock forward (expiry)
beforeAll(async () => {
  t = await makeKeyApp(
    {},
    {
      now: () => Date.now() + offset,
      resolveHost: async (host) => {
        const found = DNS[host]
        if (!found) throw new Error(`ENOTFOUND ${host}`)
        return found
      },
    },
  )
})
afterAll(() => t[Symbol.asyncDispose]())

const DAY = 86_400_000
const inDays = (days: number) => new Date(Date.now() + offset + days * DAY).toISOString()
const keysPath = '/o/acme/api-keys'

async function expectValidation(res: { status: number; body: any }, field?: string) {
  expect(res.status).toBe(400)
  expect(res.body.code).toBe('VALIDATION_ERROR')
  expect(typeof res.body.error).toBe('string')
  if (field) expect(JSON.stringify(res.body)).toContain(field)
}

describe('POST /o/{org}/api-keys', () => {
  test('201 ApiKeyWithSecret with the defaults; the secret is sk_live_…, prefix its start, stored only as a hash', async () => {
    const res = await t.createKey({ name: 'deploy bot' })
    expect(res.status).toBe(201)
    const key = res.body
    expect(key).toMatchObject({
      name: 'deploy bot',
      scopes: ['runs:read', 'runs:write'],
      max_concurrent: 4,
      webhook_url: null,
      expires_at: null,
      created_by: { id: t.admin.id, email: 'admin@acme.test' },
      last_used_at: null,
    })
    expect(key.id).toMatch(/^key_[0-9a-f]+$/)
    expect(key.secret).toMatch(/^sk_live_[A-Za-z0-9_-]{40,}$/)
    expect(key.secret.startsWith(key.prefix)).toBe(true)
    expect(key.prefix.length).toBeLessThan(key.secret.length)
    expect(new Date(key.created_at).toISOString()).toBe(key.created_at)
    expect(key).not.toHaveProperty('webhook_secret')
    // Not kept anywhere in the database.
    const dump =
      (await Bun.file(t.config.dbPath).text()) +
      (await Bun.file(`${t.config.dbPath}-wal`)
        .text()
        .catch(() => ''))
    expect(dump).toContain(key.prefix)
    expect(dump).not.toContain(key.secret)
  })

  test('explicit scopes, max_concurrent and expires_at are kept', async () => {
    const expires = inDays(30)
    const res = await t.createKey({ name: 'reader', scopes: ['runs:read'], max_concurrent: 100, expires_at: expires })
    expect(res.status).toBe(201)
    expect(res.body).toMatchObject({ scopes: ['runs:read'], max_concurrent: 100, expires_at: expires })
    expect((await t.createKey({ name: 'n', expires_at: null, max_concurrent: 1 })).body).toMatchObject({
      expires_at: null,
      max_concurrent: 1,
    })
    expect((await t.createKey({ name: 'x'.repeat(100) })).status).toBe(201)
    expect((await t.createKey({ name: 'almost a year', expires_at: inDays(364) })).status).toBe(201)
  })

  test('400 VALIDATION_ERROR for every invalid field and for unknown fields', async () => {
    const cases: [Record<string, unknown> | string | undefined, string][] = [
      [{}, 'name'],
      [{ name: '' }, 'name'],
      [{ name: '   ' }, 'name'],
      [{ name: 'x'.repeat(101) }, 'name'],
      [{ name: 7 }, 'name'],
      [{ name: 'k', scopes: [] }, 'scopes'],
      [{ name: 'k', scopes: ['runs:admin'] }, 'scopes'],
      [{ name: 'k', scopes: ['runs:read', 'runs:read'] }, 'scopes'],
      [{ name: 'k', scopes: 'runs:read' }, 'scopes'],
      [{ name: 'k', max_concurrent: 0 }, 'max_concurrent'],
      [{ name: 'k', max_concurrent: 101 }, 'max_concurrent'],
      [{ name: 'k', max_concurrent: 2.5 }, 'max_concurrent'],
      [{ name: 'k', max_concurrent: '4' }, 'max_concurrent'],
      [{ name: 'k', expires_at: 'next week' }, 'expires_at'],
      [{ name: 'k', expires_at: new Date(Date.now() - 60_000).toISOString() }, 'expires_at'],
      [{ name: 'k', expires_at: inDays(367) }, 'expires_at'],
      [{ name: 'k', webhook_url: 'https://hooks.example.com/x' }, 'webhook_url'],
      [{ name: 'k', owner: 'me' }, 'owner'],
    ]
    for (const [body, field] of cases) {
      const res = await t.call('POST', keysPath, t.admin.token, body)
      expect([JSON.stringify(body).slice(0, 60), res.status]).toEqual([JSON.stringify(body).slice(0, 60), 400])
      await expectValidation(res, field)
    }
    const raw = await t.app.handle(
      req('POST', keysPath, { token: t.admin.token, body: '{"name": ', headers: { 'content-type': 'application/json' } }),
    )
    expect(raw.status).toBe(400)
    expect(((await raw.json()) as any).code).toBe('VALIDATION_ERROR')
  })

  test('org admins only: a member gets 403; a caller with no role in the org 404', async () => {
    expect((await t.createKey({}, t.member.token)).status).toBe(403)
    expect((await t.call('POST', '/o/other/api-keys', t.admin.token, { name: 'k' })).status).toBe(404)
    expect((await t.call('POST', keysPath, t.stranger.token, { name: 'k' })).status).toBe(404)
  })
})

describe('GET /o/{org}/api-keys', () => {
  test('admins see every live key without its secret; revoked and expired keys are not listed', async () => {
    const live = (await t.createKey({ name: 'listed' })).body
    const revoked = (await t.createKey({ name: 'revoked' })).body
    const expiring = (await t.createKey({ name: 'expiring', expires_at: inDays(1) })).body
    expect((await t.call('DELETE', `${keysPath}/${revoked.id}`, t.admin.token)).status).toBe(204)
    offset += 2 * DAY
    try {
      const res = await t.call('GET', keysPath, t.admin2.token)
      expect(res.status).toBe(200)
      const ids = res.body.data.map((k: { id: string }) => k.id)
      expect(ids).toContain(live.id)
      expect(ids).not.toContain(revoked.id)
      expect(ids).not.toContain(expiring.id)
      for (const key of res.body.data) {
        expect(key).not.toHaveProperty('secret')
        expect(key).not.toHaveProperty('webhook_secret')
        expect(key.prefix).toMatch(/^sk_live_/)
      }
    } finally {
      offset -= 2 * DAY
    }
    expect((await t.call('GET', keysPath, t.member.token)).status).toBe(403)
    expect((await t.call('GET', '/o/other/api-keys', t.admin.token)).status).toBe(404)
  })
})

describe('PATCH /o/{org}/api-keys/{key}: the webhook', () => {
  test('the secret is minted with the first URL, kept when the URL changes, rotated on request, removed with the URL', async () => {
    const key = (await t.createKey({ name: 'hooks' })).body
    const path = `${keysPath}/${key.id}`
    const first = await t.call('PATCH', path, t.admin.token, { webhook_url: 'https://hooks.example.com/agentd' })
    expect(first.status).toBe(200)
    expect(first.body.webhook_url).toBe('https://hooks.example.com/agentd')
    expect(first.body.webhook_secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/)
    expect(Buffer.from(first.body.webhook_secret.slice(6), 'base64').length).toBeGreaterThanOrEqual(24)
    expect(first.body).not.toHaveProperty('secret')

    const moved = await t.call('PATCH', path, t.admin.token, { webhook_url: 'https://other.example.com/v2' })
    expect(moved.status).toBe(200)
    expect(moved.body.webhook_url).toBe('https://other.example.com/v2')
    expect(moved.body).not.toHaveProperty('webhook_secret')

    const rotated = await t.call('PATCH', path, t.admin.token, { rotate_secret: true })
    expect(rotated.body.webhook_secret).toMatch(/^whsec_/)
    expect(rotated.body.webhook_secret).not.toBe(first.body.webhook_secret)
    expect((await t.call('PATCH', path, t.admin.token, { rotate_secret: false })).body).not.toHaveProperty('webhook_secret')
    expect((await t.call('PATCH', path, t.admin.token, {})).status).toBe(200)

    const cleared = await t.call('PATCH', path, t.admin.token, { webhook_url: null })
    expect(cleared.status).toBe(200)
    expect(cleared.body.webhook_url).toBeNull()
    expect(cleared.body).not.toHaveProperty('webhook_secret')
    // A URL set again after clearing gets a new secret.
    const again = await t.call('PATCH', path, t.admin.token, { webhook_url: 'https://hooks.example.com/agentd' })
    expect(again.body.webhook_secret).toMatch(/^whsec_/)
    expect(again.body.webhook_secret).not.toBe(rotated.body.webhook_secret)
    expect((await t.call('GET', keysPath, t.admin.token)).body.data.find((k: { id: string }) => k.id === key.id)).not.toHaveProperty(
      'webhook_secret',
    )
  })

  test('400 VALIDATION_ERROR: unknown field, not a URL, not https, over 2048 characters, rotate_secret without a URL, wrong types', async () => {
    const key = (await t.createKey({ name: 'bad hooks' })).body
    const path = `${keysPath}/${key.id}`
    const long = `https://hooks.example.com/${'a'.repeat(2048 - 'https://hooks.example.com/'.length + 1)}`
    const cases: [unknown, string][] = [
      [{ webhook_url: 'https://hooks.example.com/x', name: 'renamed' }, 'name'],
      [{ url: 'https://hooks.example.com/x' }, 'url'],
      [{ webhook_url: 'not a url' }, 'webhook_url'],
      [{ webhook_url: 'http://hooks.example.com/x' }, 'webhook_url'],
      [{ webhook_url: 'ftp://hooks.example.com/x' }, 'webhook_url'],
      [{ webhook_url: long }, 'webhook_url'],
      [{ webhook_url: 42 }, 'webhook_url'],
      [{ rotate_secret: true }, 'rotate_secret'],
      [{ webhook_url: null, rotate_secret: true }, 'rotate_secret'],
      [{ rotate_secret: 'yes' }, 'rotate_secret'],
      [{ webhook_url: 'https://unknown-host.example.com/x' }, 'webhook_url'],
    ]
    for (const [body, field] of cases) {
      const res = await t.call('PATCH', path, t.admin.token, body)
      expect([JSON.stringify(body).slice(0, 60), res.status]).toEqual([JSON.stringify(body).slice(0, 60), 400])
      await expectValidation(res, field)
    }
    // 2048 characters exactly is fine.
    const exact = `https://hooks.example.com/${'a'.repeat(2048 - 'https://hooks.example.com/'.length)}`
    expect((await t.call('PATCH', path, t.admin.token, { webhook_url: exact })).status).toBe(200)
  })

  test('SSRF: URLs that are or resolve to 127.0.0.1, 10.0.0.1, 169.254.169.254 or ::1 are refused', async () => {
    const key = (await t.createKey({ name: 'ssrf' })).body
    const path = `${keysPath}/${key.id}`
    for (const url of [
      'https://127.0.0.1/hook',
      'https://10.0.0.1/hook',
      'https://169.254.169.254/latest/meta-data/',
      'https://[::1]/hook',
      'https://loop.example.com/hook',
      'https://ten.example.com/hook',
      'https://metadata.example.com/hook',
      'https://six.example.com/hook',
    ]) {
      const res = await t.call('PATCH', path, t.admin.token, { webhook_url: url })
      expect([url, res.status]).toEqual([url, 400])
      expect(res.body.code).toBe('VALIDATION_ERROR')
    }
    expect((await t.call('GET', keysPath, t.admin.token)).body.data.find((k: { id: string }) => k.id === key.id).webhook_url).toBeNull()
  })

  test('only the key’s creator: another admin gets 403; unknown, revoked or foreign keys 404', async () => {
    const key = (await t.createKey({ name: 'mine' })).body
    expect((await t.call('PATCH', `${keysPath}/${key.id}`, t.admin2.token, { webhook_url: 'https://hooks.example.com/x' })).status).toBe(
      403,
    )
    expect((await t.call('PATCH', `${keysPath}/${key.id}`, t.member.token, { webhook_url: 'https://hooks.example.com/x' })).status).toBe(
      403,
    )
    expect((await t.call('PATCH', `${keysPath}/key_nope`, t.admin.token, {})).status).toBe(404)
    expect((await t.call('PATCH', `/o/other/api-keys/${key.id}`, t.stranger.token, {})).status).toBe(404)
    await t.call('DELETE', `${keysPath}/${key.id}`, t.admin.token)
    expect((await t.call('PATCH', `${keysPath}/${key.id}`, t.admin.token, {})).status).toBe(404)
  })
})

describe('DELETE and rotate', () => {
  test('any admin revokes (204); the next use of the key is refused; a second DELETE is 404; members get 403', async () => {
    const key = (await t.createKey({ name: 'to revoke' })).body
    expect((await t.call('GET', '/o/acme/p/_/sessions', key.secret)).status).toBe(200)
    expect((await t.call('DELETE', `${keysPath}/${key.id}`, t.member.token)).status).toBe(403)
    const res = await t.app.handle(req('DELETE', `${keysPath}/${key.id}`, { token: t.admin2.token }))
    expect(res.status).toBe(204)
    expect(await res.text()).toBe('')
    const refused = await t.call('GET', '/o/acme/p/_/sessions', key.secret)
    expect(refused.status).toBe(401)
    expect(refused.body.code).toBe('AUTH_FAILED')
    expect((await t.call('DELETE', `${keysPath}/${key.id}`, t.admin.token)).status).toBe(404)
  })

  test('rotate (creator only): a new secret, the old one stops at once, expiry kept', async () => {
    const expires = inDays(10)
    const key = (await t.createKey({ name: 'rotating', expires_at: expires })).body
    expect((await t.call('GET', '/o/acme/p/_/sessions', key.secret)).status).toBe(200)
    expect((await t.call('POST', `${keysPath}/${key.id}/rotate`, t.admin2.token)).status).toBe(403)
    const res = await t.call('POST', `${keysPath}/${key.id}/rotate`, t.admin.token)
    expect(res.status).toBe(200)
    expect(res.body.secret).toMatch(/^sk_live_/)
    expect(res.body.secret).not.toBe(key.secret)
    expect(res.body.secret.startsWith(res.body.prefix)).toBe(true)
    expect(res.body).toMatchObject({ id: key.id, expires_at: expires, name: 'rotating' })
    expect((await t.call('GET', '/o/acme/p/_/sessions', key.secret)).status).toBe(401)
    expect((await t.call('GET', '/o/acme/p/_/sessions', res.body.secret)).status).toBe(200)
  })

  test('an expired key is refused and cannot be rotated (404)', async () => {
    const key = (await t.createKey({ name: 'short', expires_at: inDays(1) })).body
    expect((await t.call('GET', '/o/acme/p/_/sessions', key.secret)).status).toBe(200)
    offset += DAY + 60_000
    try {
      expect((await t.call('GET', '/o/acme/p/_/sessions', key.secret)).status).toBe(401)
      expect((await t.call('POST', `${keysPath}/${key.id}/rotate`, t.admin.token)).status).toBe(404)
    } finally {
      offset -= DAY + 60_000
    }
  })
})

describe('a key as a bearer', () => {
  test('acts as its creator on session routes, only in its own org; last_used_at is set', async () => {
    const key = (await t.createKey({ name: 'reader' })).body
    const res = await t.call('GET', '/o/acme/p/_/sessions', key.secret)
    expect(res.status).toBe(200)
    const listed = (await t.call('GET', keysPath, t.admin.token)).body.data.find((k: { id: string }) => k.id === key.id)
    expect(Date.now() - Date.parse(listed.last_used_at)).toBeLessThan(10_000)
    // The creator belongs to no other org, and the key would not reach it even if they did.
    t.identity.createUser('other', 'admin@acme.test', 'member')
    expect((await t.call('GET', '/o/other/p/_/sessions', t.admin.token)).status).toBe(200)
    expect((await t.call('GET', '/o/other/p/_/sessions', key.secret)).status).toBe(404)
  })

  test('401 on routes keys cannot call: API-key routes and the discovery read', async () => {
    const key = (await t.createKey({ name: 'not here' })).body
    for (const [method, path, body] of [
      ['GET', keysPath],
      ['POST', keysPath, { name: 'child' }],
      ['PATCH', `${keysPath}/${key.id}`, {}],
      ['DELETE', `${keysPath}/${key.id}`],
      ['POST', `${keysPath}/${key.id}/rotate`],
      ['GET', `${keysPath}/${key.id}/deliveries`],
      ['GET', '/o/acme/agents/available'],
    ] as [string, string, unknown?][]) {
      const res = await t.call(method, path, key.secret, body)
      expect([method, path, res.status]).toEqual([method, path, 401])
      expect(res.body.code).toBe('AUTH_FAILED')
    }
    // Still live: the refused calls revoked nothing.
    expect((await t.call('GET', '/o/acme/p/_/sessions', key.secret)).status).toBe(200)
  })

  test('an unknown or mangled sk_live_ token is 401', async () => {
    const key = (await t.createKey({ name: 'real' })).body
    for (const token of ['sk_live_nope', `${key.secret}x`, key.secret.slice(0, -1), `${key.prefix}${'A'.repeat(43)}`]) {
      const res = await t.call('GET', '/o/acme/p/_/sessions', token)
      expect(res.status).toBe(401)
      expect(res.body.code).toBe('AUTH_FAILED')
    }
  })

  test('scopes: runs:read for GET session routes, runs:write for POST and PATCH; else 403 INSUFFICIENT_SCOPE', async () => {
    const reader = (await t.createKey({ name: 'r', scopes: ['runs:read'] })).body
    const writer = (await t.createKey({ name: 'w', scopes: ['runs:write'] })).body
    const create = (token: string) => t.call('POST', '/o/acme/p/_/sessions', token, { agent: 'harness_2', prompt: 'hello' })
    const denied = await create(reader.secret)
    expect(denied.status).toBe(403)
    expect(denied.body).toMatchObject({ code: 'INSUFFICIENT_SCOPE' })
    expect(typeof denied.body.error).toBe('string')
    const patched = await t.call('PATCH', '/o/acme/p/_/sessions/00000000-0000-0000-0000-000000000000', reader.secret, {
      status: 'cancelled',
    })
    expect(patched.status).toBe(403)
    expect((await t.call('GET', '/o/acme/p/_/sessions', writer.secret)).status).toBe(403)
    expect((await t.call('GET', '/o/acme/p/_/sessions', reader.secret)).status).toBe(200)
    const started = await create(writer.secret)
    expect(started.status).toBe(202)
  })
})

describe('runs started with a key', () => {
  test('the run records its key and acts as the creator (started_by)', async () => {
    const key = (await t.createKey({ name: 'starter' })).body
    const res = await t.call('POST', '/o/acme/p/_/sessions', key.secret, { agent: 'harness_2', prompt: 'hello' })
    expect(res.status).toBe(202)
    expect(res.body.started_by).toEqual({ name: 'admin', avatar_url: null })
    expect(t.store.get(res.body.execution_id)!.apiKeyId).toBe(key.id)
    const byUser = await t.call('POST', '/o/acme/p/_/sessions', t.admin.token, { agent: 'harness_2', prompt: 'hello' })
    expect(t.store.get(byUser.body.execution_id)!.apiKeyId).toBeNull()
  })

  test('429 RATE_LIMITED once max_concurrent runs are in progress; a slot frees when one ends', async () => {
    const key = (await t.createKey({ name: 'limited', max_concurrent: 2 })).body
    const start = (prompt: string) => t.call('POST', '/o/acme/p/_/sessions', key.secret, { agent: 'harness_2', prompt })
    const short = await start(script([{ answer: 'quick' }]))
    const long = await start(script([{ sleep: 60_000 }]))
    expect([short.status, long.status]).toEqual([202, 202])
    const limited = await start('one too many')
    expect(limited.status).toBe(429)
    expect(limited.body).toMatchObject({ code: 'RATE_LIMITED' })
    // The same caller signed in is not limited by the key.
    expect((await t.call('POST', '/o/acme/p/_/sessions', t.admin.token, { agent: 'harness_2', prompt: 'signed in' })).status).toBe(202)
    await settled(async () => (await t.call('GET', `/o/acme/p/_/sessions/${short.body.execution_id}`, key.secret)).body, {
      timeoutMs: 50_000,
    })
    expect((await start('fits again')).status).toBe(202)
  }, 60_000)

  test('422 API_KEY_FIELD_UNSUPPORTED for a saved agent or sources on a key run', async () => {
    const key = (await t.createKey({ name: 'shape A only' })).body
    for (const extra of [{ agent_id: 'agent_123' }, { resources: [{ url: 'https://github.com/acme/web' }] }]) {
      const res = await t.call('POST', '/o/acme/p/_/sessions', key.secret, { agent: 'harness_2', prompt: 'hello', ...extra })
      expect(res.status).toBe(422)
      expect(res.body).toMatchObject({ code: 'API_KEY_FIELD_UNSUPPORTED' })
      // Signed in, the same body is not run silently without them either: a saved agent is a
      // shape B field (400), and no installation here reaches the repository (422).
      expect((await t.call('POST', '/o/acme/p/_/sessions', t.admin.token, { agent: 'harness_2', prompt: 'hello', ...extra })).status).toBe(
        'agent_id' in extra ? 400 : 422,
      )
    }
  })
})

describe('GET /o/{org}/api-keys/{key}/deliveries', () => {
  test('admins only; an empty list for a key without deliveries; 404 for a key of another org', async () => {
    const key = (await t.createKey({ name: 'quiet' })).body
    const res = await t.call('GET', `${keysPath}/${key.id}/deliveries`, t.admin2.token)
    expect(res.status).toBe(200)
    expect(res.body).toEqual({ data: [] })
    expect((await t.call('GET', `${keysPath}/${key.id}/deliveries`, t.member.token)).status).toBe(403)
    expect((await t.call('GET', `/o/other/api-keys/${key.id}/deliveries`, t.stranger.token)).status).toBe(404)
    expect((await t.call('GET', `${keysPath}/${key.id}/deliveries?limit=0`, t.admin.token)).status).toBe(400)
  })

  test('documented in OpenAPI with the other key routes', async () => {
    const doc = (await t.call('GET', '/openapi.json', t.admin.token)).body
    expect(doc.paths['/o/{org}/api-keys/{key}/deliveries'].get.operationId).toBe('apiKeys.deliveries')
    expect(doc.paths['/o/{org}/api-keys'].post.operationId).toBe('apiKeys.create')
    expect(Object.keys(doc.paths['/o/{org}/api-keys/{key}'])).toEqual(expect.arrayContaining(['patch', 'delete']))
    expect(doc.paths['/o/{org}/api-keys/{key}/rotate'].post.operationId).toBe('apiKeys.rotate')
    expect(Object.keys(doc.paths['/o/{org}/p/{project}/sessions'].post.responses)).toEqual(expect.arrayContaining(['403', '429']))
  })
})
