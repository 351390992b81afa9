/**
 * Project environments over HTTP (contract section 10): secrets (sealed at rest, names only ever
 * shown) and the environment (setup, its time limit, network.allow), for org admins only; the key
 * agentd generates in DATA_DIR when the config names none, and a restart that opens the same
 * secrets with it.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { randomBytes } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../../sandbox/process'
import { loadConfig } from '../../src/config'
import { RESERVED_SECRET_NAMES } from '../../src/environments/secret-names'
import { sandboxScope, startServices } from '../../src/server'
import { makeTestApp, type TestApp } from '../helpers/app'
import { removeDataDir } from '../helpers/cleanup'
import { req } from '../helpers/http'

let t: TestApp
let keySecret: string
const logLines: string[] = []
/** Every value this file stores as a secret: none may come back in any answer or log line. */
const stored = new Set<string>()
/** Every answer's body, for the check that no value was ever in one. */
const answers: string[] = []

const canary = (label: string) => {
  const value = `${label}-${randomBytes(12).toString('hex')}`
  stored.add(value)
  return value
}

async function call(method: string, path: string, body?: unknown, token = t.admin.token) {
  const res = await t.app.handle(req(method, path, { token, ...(body === undefined ? {} : { body }) }))
  const text = await res.text()
  answers.push(text)
  return { status: res.status, body: text ? JSON.parse(text) : null }
}
const putSecret = (name: string, value: unknown, token?: string, project = 'web') =>
  call('PUT', `/o/acme/projects/${project}/secrets/${name}`, { value }, token)
const names = async (project = 'web') =>
  (await call('GET', `/o/acme/projects/${project}/secrets`)).body.data.map((s: { name: string }) => s.name)

beforeAll(async () => {
  t = await makeTestApp({}, { log: (line) => logLines.push(line) })
  const made = await call('POST', '/o/acme/api-keys', { name: 'ci' })
  expect(made.status).toBe(201)
  keySecret = made.body.secret
})
afterAll(() => t?.[Symbol.asyncDispose]())

describe('secrets', () => {
  test('PUT makes (204) and replaces a secret; GET lists names and times only; DELETE removes it (204), then 404', async () => {
    expect(await call('GET', '/o/acme/projects/web/secrets')).toEqual({ status: 200, body: { data: [] } })
    const first = canary('first')
    expect(await putSecret('NPM_TOKEN', first)).toEqual({ status: 204, body: null })
    expect(await putSecret('DATABASE_URL', canary('db'))).toEqual({ status: 204, body: null })
    const listed = await call('GET', '/o/acme/projects/web/secrets')
    expect(listed).toEqual({
      status: 200,
      body: {
        data: [
          { name: 'DATABASE_URL', updated_at: expect.any(String) },
          { name: 'NPM_TOKEN', updated_at: expect.any(String) },
        ],
      },
    })
    expect(new Date(listed.body.data[1].updated_at).toISOString()).toBe(listed.body.data[1].updated_at)
    const second = canary('second')
    expect((await putSecret('NPM_TOKEN', second)).status).toBe(204)
    expect(await names()).toEqual(['DATABASE_URL', 'NPM_TOKEN'])
    expect((await t.secrets.values(t.project.id)).NPM_TOKEN).toBe(second)
    // The Project by its id works as by its name.
    expect(await names(t.project.id)).toEqual(['DATABASE_URL', 'NPM_TOKEN'])
    expect(await call('DELETE', '/o/acme/projects/web/secrets/DATABASE_URL')).toEqual({ status: 204, body: null })
    expect(await names()).toEqual(['NPM_TOKEN'])
    const again = await call('DELETE', '/o/acme/projects/web/secrets/DATABASE_URL')
    expect({ status: again.status, error: typeof again.body.error }).toEqual({ status: 404, error: 'string' })
    expect((await call('DELETE', '/o/acme/projects/web/secrets/NEVER_SET')).status).toBe(404)
    expect((await call('DELETE', '/o/acme/projects/web/secrets/NPM_TOKEN')).status).toBe(204)
  })

  test('a name is ^[A-Z_][A-Z0-9_]{0,127}$, not reserved (any case for the prefixes), nor a harness variable: else 400 VALIDATION_ERROR', async () => {
    const good = [
      'A',
      '_',
      'API_TOKEN',
      `X${'Y'.repeat(127)}`,
      'PATH_EXTRA',
      'HOMEBREW_TOKEN',
      'LANGUAGE_KEY',
      'GITHUB_TOKEN',
      'MY_HTTP_PROXY',
    ]
    for (const name of good) expect({ name, status: (await putSecret(name, canary('ok'))).status }).toEqual({ name, status: 204 })
    const bad = [
      `X${'Y'.repeat(128)}`,
      '1ABC',
      'abc',
      'Api_Token',
      'A-B',
      'A.B',
      'A%20B',
      ...['PATH', 'HOME', 'USER', 'SHELL', 'PWD', 'TERM', 'LANG'],
      ...['LC_ALL', 'LC_', 'LD_PRELOAD', 'LD_LIBRARY_PATH', 'AGENTD_GATEWAY_KEY', 'AGENTD_X'],
      ...['HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY', 'ALL_PROXY', 'HTTP_PROXY_USER', 'HTTPS_PROXYX', 'NO_PROXY_LIST', 'ALL_PROXY_2'],
      ...['http_proxy', 'https_proxy', 'no_proxy', 'all_proxy', 'Http_Proxy', 'lc_all', 'Ld_Preload', 'agentd_x'],
      ...[
        'ANTHROPIC_API_KEY',
        'ANTHROPIC_BASE_URL',
        'ANTHROPIC_MODEL',
        'CLAUDE_CODE_USE_BEDROCK',
        'CODEX_HOME',
        'OPENAI_API_KEY',
        'OPENAI_BASE_URL',
      ],
      ...[
        'GEMINI_API_KEY',
        'GEMINI_CLI_NO_RELAUNCH',
        'GOOGLE_GEMINI_BASE_URL',
        'IS_SANDBOX',
        'DISABLE_TELEMETRY',
        'DISABLE_AUTOUPDATER',
        'DISABLE_ERROR_REPORTING',
      ],
      ...RESERVED_SECRET_NAMES,
    ]
    for (const name of bad) {
      const value = canary('refused')
      const answer = await putSecret(encodeURIComponent(name), value)
      expect({ name, status: answer.status, code: answer.body.code }).toEqual({ name, status: 400, code: 'VALIDATION_ERROR' })
    }
    const listed = await names()
    expect(listed.sort()).toEqual([...good].sort())
    for (const name of good) await call('DELETE', `/o/acme/projects/web/secrets/${name}`)
  })

  test('a value is a string of 1 byte to 64 KiB (UTF-8 bytes), without NUL: else 400, and the error never quotes it', async () => {
    const marker = canary('edge')
    // 64 KiB exactly, of multi-byte characters (é is 2 bytes): fine; one byte more is not.
    const full = marker + 'é'.repeat(Math.floor((65536 - marker.length) / 2)) + 'x'.repeat((65536 - marker.length) % 2)
    expect(Buffer.byteLength(full)).toBe(65536)
    stored.add(full)
    expect((await putSecret('BIG', full)).status).toBe(204)
    expect((await t.secrets.values(t.project.id)).BIG).toBe(full)
    const over = `${full}x`
    stored.add(over)
    for (const value of ['', over, `${marker}\0nul`, 12345678, null, { nested: marker }, [marker], true]) {
      const answer = await putSecret('EDGE', value)
      expect({ value: String(value).slice(0, 20), status: answer.status, code: answer.body.code }).toEqual({
        value: String(value).slice(0, 20),
        status: 400,
        code: 'VALIDATION_ERROR',
      })
      expect(JSON.stringify(answer.body)).not.toContain(marker)
      expect(JSON.stringify(answer.body)).not.toContain('12345678')
    }
    for (const body of [{}, { value: marker, extra: 1 }, `{"value": "${marker}"`]) {
      const answer = await call('PUT', '/o/acme/projects/web/secrets/EDGE', body)
      expect(answer.status).toBe(400)
      expect(JSON.stringify(answer.body)).not.toContain(marker)
    }
    expect(await names()).toEqual(['BIG'])
    await call('DELETE', '/o/acme/projects/web/secrets/BIG')
  })

  test('100 secrets are fine, the 101st is 422 TOO_MANY_SECRETS; replacing one of the 100 still works', async () => {
    for (let i = 0; i < 100; i++) expect((await putSecret(`S_${i}`, canary('many'))).status).toBe(204)
    const over = await putSecret('S_100', canary('over'))
    expect({ status: over.status, code: over.body.code }).toEqual({ status: 422, code: 'TOO_MANY_SECRETS' })
    expect((await putSecret('S_7', canary('replaced'))).status).toBe(204)
    expect((await names()).length).toBe(100)
    // Another Project has its own 100.
    t.identity.createProject('acme', 'api', null)
    expect((await putSecret('S_100', canary('elsewhere'), undefined, 'api')).status).toBe(204)
    for (let i = 0; i < 100; i++) await call('DELETE', `/o/acme/projects/web/secrets/S_${i}`)
    await call('DELETE', '/o/acme/projects/api/secrets/S_100')
  })

  test('values and digest for the runtime: every secret opened; equal sets, equal digests; a changed value, another digest; none, a fixed one', async () => {
    const web = t.project.id
    const api = t.identity.createProject('acme', 'digests', null).id
    const empty = await t.secrets.digest(web)
    expect(empty).toMatch(/^[0-9a-f]{64}$/)
    expect(await t.secrets.digest(api)).toBe(empty)
    expect(await t.secrets.values(web)).toEqual({})
    const token = canary('tok')
    for (const project of [web, api]) {
      await t.secrets.set(project, 'TOKEN', token)
      await t.secrets.set(project, 'OTHER', 'same')
    }
    expect(await t.secrets.values(web)).toEqual({ OTHER: 'same', TOKEN: token })
    const both = await t.secrets.digest(web)
    expect(both).not.toBe(empty)
    expect(await t.secrets.digest(api)).toBe(both)
    expect(await t.secrets.snapshot(api)).toEqual({ values: { OTHER: 'same', TOKEN: token }, digest: both })
    await t.secrets.set(api, 'OTHER', 'changed')
    expect(await t.secrets.digest(api)).not.toBe(both)
    await t.secrets.set(api, 'OTHER', 'same')
    expect(await t.secrets.digest(api)).toBe(both)
    // The pairs cannot be shifted into one another: A=b, C=d is not A=b\0C=d as one value.
    await t.secrets.set(api, 'RENAMED', 'same')
    t.secrets.remove(api, 'OTHER')
    expect(await t.secrets.digest(api)).not.toBe(both)
    expect(t.secrets.remove(api, 'OTHER')).toBe(false)
    for (const name of ['TOKEN', 'OTHER']) t.secrets.remove(web, name)
    expect(await t.secrets.digest(web)).toBe(empty)
  })

  test('a sealed value copied onto another Project or name does not open', async () => {
    const value = canary('copied')
    await t.secrets.set(t.project.id, 'ORIGINAL', value)
    const other = t.identity.createProject('acme', 'copies', null).id
    // Another connection to the same file, as someone with the database in hand would.
    const sqlite = new Database(t.config.dbPath)
    const sealed = sqlite
      .query<{ sealed: string }, [string]>("SELECT sealed FROM project_secrets WHERE project_id = ? AND name = 'ORIGINAL'")
      .get(t.project.id)!.sealed
    sqlite.run('INSERT INTO project_secrets (project_id, name, sealed, updated_at) VALUES (?, ?, ?, 0)', [other, 'ORIGINAL', sealed])
    sqlite.run('INSERT INTO project_secrets (project_id, name, sealed, updated_at) VALUES (?, ?, ?, 0)', [t.project.id, 'RENAMED', sealed])
    sqlite.close()
    await expect(t.secrets.values(other)).rejects.toThrow(/ORIGINAL cannot be opened/)
    await expect(t.secrets.values(t.project.id)).rejects.toThrow(/RENAMED cannot be opened/)
    t.secrets.remove(t.project.id, 'RENAMED')
    expect(await t.secrets.values(t.project.id)).toEqual({ ORIGINAL: value })
    t.secrets.remove(t.project.id, 'ORIGINAL')
  })
})

describe('environment', () => {
  const defaults = { setup: null, setup_timeout_s: 900, network: { allow: [] } }

  test('GET answers the defaults at revision 0 (updated_at null); each PUT replaces it whole and adds 1 to the revision', async () => {
    expect(await call('GET', '/o/acme/projects/web/environment')).toEqual({
      status: 200,
      body: { ...defaults, revision: 0, updated_at: null },
    })
    const full = {
      setup: 'npm ci\nnpm run build\n',
      setup_timeout_s: 1200,
      network: { allow: ['registries', 'api.example.com:443', '*.example.org', '10.1.2.3:8080', '[2001:db8::1]:443'] },
    }
    const first = await call('PUT', '/o/acme/projects/web/environment', full)
    expect(first).toEqual({ status: 200, body: { ...full, revision: 1, updated_at: expect.any(String) } })
    expect(await call('GET', '/o/acme/projects/web/environment')).toEqual(first)
    // Absent fields take their defaults again: the environment is replaced, not patched.
    const second = await call('PUT', '/o/acme/projects/web/environment', { setup: 'make' })
    expect(second).toEqual({ status: 200, body: { ...defaults, setup: 'make', revision: 2, updated_at: expect.any(String) } })
    expect((await call('PUT', '/o/acme/projects/web/environment', {})).body).toEqual({
      ...defaults,
      revision: 3,
      updated_at: expect.any(String),
    })
    expect((await call('PUT', '/o/acme/projects/web/environment', { setup: null, network: {} })).body).toMatchObject({
      ...defaults,
      revision: 4,
    })
    expect((await call('GET', `/o/acme/projects/${t.project.id}/environment`)).body.revision).toBe(4)
    // Another Project's is its own.
    t.identity.createProject('acme', 'fresh', null)
    expect((await call('GET', '/o/acme/projects/fresh/environment')).body).toEqual({ ...defaults, revision: 0, updated_at: null })
    expect(t.environments.get(t.project.id)).toMatchObject({ ...defaults, revision: 4 })
  })

  test('setup at most 64 KiB; setup_timeout_s an integer 1..3600; at most 100 allow entries, each a valid form: else 400 VALIDATION_ERROR', async () => {
    const ok = async (body: unknown) => {
      const answer = await call('PUT', '/o/acme/projects/web/environment', body)
      expect({ body: JSON.stringify(body).slice(0, 80), status: answer.status }).toEqual({
        body: JSON.stringify(body).slice(0, 80),
        status: 200,
      })
      return answer.body
    }
    const refused = async (body: unknown) => {
      const answer = await call('PUT', '/o/acme/projects/web/environment', body)
      expect({ body: JSON.stringify(body).slice(0, 80), status: answer.status, code: answer.body.code }).toEqual({
        body: JSON.stringify(body).slice(0, 80),
        status: 400,
        code: 'VALIDATION_ERROR',
      })
    }
    const before = t.environments.get(t.project.id).revision
    await ok({ setup: 'é'.repeat(32768) })
    await refused({ setup: `${'é'.repeat(32768)}x` })
    await ok({ setup_timeout_s: 1 })
    await ok({ setup_timeout_s: 3600 })
    for (const timeout of [0, 3601, -5, 1.5, 'ten', null]) await refused({ setup_timeout_s: timeout })
    const hundred = Array.from({ length: 100 }, (_, i) => `h${i}.example.com`)
    expect((await ok({ network: { allow: hundred } })).network.allow).toEqual(hundred)
    await refused({ network: { allow: [...hundred, 'one-more.example.com'] } })
    const good = [
      'registries',
      'example.com',
      'Example.COM:443',
      'localhost:8080',
      '*.example.com',
      '*.example.com:8443',
      '1.2.3.4',
      '1.2.3.4:80',
      '::1',
      '2001:db8::1',
      '[2001:db8::1]',
      '[2001:db8::1]:443',
      'a-b.c-d.example',
      'xn--bcher-kva.example',
    ]
    expect((await ok({ network: { allow: good } })).network.allow).toEqual(good)
    const bad = [
      '',
      ' example.com',
      'example.com ',
      'https://example.com',
      'example.com/path',
      'example.com.',
      'exa_mple.com',
      '-example.com',
      'example-.com',
      'a..com',
      '*.com',
      '*.*.example.com',
      '*example.com',
      'example.*.com',
      'example.com:0',
      'example.com:65536',
      'example.com:080',
      'example.com:',
      'example.com:https',
      '1.2.3',
      '256.1.1.1',
      '01.2.3.4',
      '1.2.3.4:99999',
      '2001:db8::1:443:',
      '[2001:db8::1',
      '[2001:db8::1]443',
      '[1.2.3.4]',
      'fe80::1%eth0',
      'registries:443',
      'REGISTRIES.',
      `${'a'.repeat(64)}.com`,
      `${'abcdefghi.'.repeat(26)}com`,
    ]
    for (const entry of bad) await refused({ network: { allow: [entry] } })
    await refused({ network: { allow: 'example.com' } })
    await refused({ network: { allow: [5] } })
    await refused({ network: { allow: [], extra: true } })
    await refused({ unknown: 1 })
    await refused({ setup: 5 })
    expect(t.environments.get(t.project.id).revision).toBe(before + 5)
  })
})

test('org admins only: a member is 403, an API key 401 AUTH_FAILED, no token 401; an unknown Project (or _) is 404', async () => {
  const routes: [string, string, unknown?][] = [
    ['GET', '/o/acme/projects/{p}/secrets'],
    ['PUT', '/o/acme/projects/{p}/secrets/SOME_NAME', { value: canary('auth') }],
    ['DELETE', '/o/acme/projects/{p}/secrets/SOME_NAME'],
    ['GET', '/o/acme/projects/{p}/environment'],
    ['PUT', '/o/acme/projects/{p}/environment', { setup: 'true' }],
  ]
  for (const [method, path, body] of routes) {
    const at = (project: string) => path.replace('{p}', project)
    const member = await call(method, at('web'), body, t.member.token)
    expect({ method, path, status: member.status }).toEqual({ method, path, status: 403 })
    const key = await call(method, at('web'), body, keySecret)
    expect({ method, path, status: key.status, code: key.body.code }).toEqual({ method, path, status: 401, code: 'AUTH_FAILED' })
    const anonymous = await t.app.handle(req(method, at('web'), body === undefined ? {} : { body }))
    expect({ method, path, status: anonymous.status }).toEqual({ method, path, status: 401 })
    for (const project of ['nope', '_']) {
      const unknown = await call(method, at(project), body)
      expect({ method, path, project, status: unknown.status }).toEqual({ method, path, project, status: 404 })
    }
  }
  expect(await names()).toEqual([])
})

test('discovery says the network allowlist is available', async () => {
  const answer = await call('GET', '/o/acme/agents/available')
  for (const harness of answer.body.harnesses) expect(harness.capabilities.network_allowlist).toEqual({ available: true })
})

test('no value ever in an answer or a log line; none in the database file or its WAL in the clear', async () => {
  const value = canary('at-rest')
  expect((await putSecret('AT_REST', value)).status).toBe(204)
  expect(stored.size).toBeGreaterThan(100)
  const files = [t.config.dbPath, `${t.config.dbPath}-wal`].filter(existsSync)
  expect(files.length).toBe(2)
  // The files do hold the secret's row (its name, its sealed value): what is looked for would be there.
  expect(files.some((file) => readFileSync(file).includes(Buffer.from('AT_REST')))).toBe(true)
  for (const file of files) {
    const bytes = readFileSync(file)
    for (const secret of stored) {
      for (const form of [secret, Buffer.from(secret).toString('base64'), Buffer.from(secret).toString('base64url')]) {
        if (bytes.includes(Buffer.from(form))) throw new Error(`${file} holds a secret value in the clear`)
      }
    }
  }
  for (const text of [...answers, ...logLines]) {
    for (const secret of stored)
      if (secret.length >= 8 && text.includes(secret.slice(0, 40))) throw new Error(`a secret value came back: ${text.slice(0, 120)}`)
  }
  t.secrets.remove(t.project.id, 'AT_REST')
})

test('without accounts.encryption_key agentd generates DATA_DIR/encryption.key (0600, said once in the log, never the key); a restart opens the same secrets', async () => {
  const file = join(t.dir, 'encryption.key')
  expect(statSync(file).mode & 0o777).toBe(0o600)
  const key = readFileSync(file, 'utf8').trim()
  expect(Buffer.from(key, 'base64').length).toBe(32)
  const said = logLines.filter((line) => line.includes('encryption key'))
  expect(said).toEqual([expect.stringContaining(file)])
  expect(logLines.some((line) => line.includes(key))).toBe(false)

  // A server of its own on one DATA_DIR, started twice.
  const dir = mkdtempSync(join(tmpdir(), 'agentd-env-restart-'))
  const start = async (lines: string[]) => {
    const services = await startServices(loadConfig({ DATA_DIR: dir }), {
      log: (line) => lines.push(line),
      driver: new ProcessDriver({ scope: sandboxScope(dir) }),
    })
    await services.ready
    return services
  }
  try {
    const firstLog: string[] = []
    const first = await start(firstLog)
    first.identity.createOrg('acme')
    const project = first.identity.createProject('acme', 'web', null)
    const value = canary('restart')
    await first.secrets.set(project.id, 'KEPT', value)
    const digest = await first.secrets.digest(project.id)
    await first.close()
    const keyBefore = readFileSync(join(dir, 'encryption.key'), 'utf8')
    const secondLog: string[] = []
    const second = await start(secondLog)
    expect(await second.secrets.values(project.id)).toEqual({ KEPT: value })
    expect(await second.secrets.digest(project.id)).toBe(digest)
    await second.close()
    expect(readFileSync(join(dir, 'encryption.key'), 'utf8')).toBe(keyBefore)
    expect(firstLog.filter((line) => line.includes('encryption key')).length).toBe(1)
    expect(secondLog.filter((line) => line.includes('encryption key'))).toEqual([])
    // A key file that holds no key stops the start, clearly.
    writeFileSync(join(dir, 'encryption.key'), 'short\n')
    await expect(start([])).rejects.toThrow(/encryption\.key must hold 32 bytes in base64/)
  } finally {
    await removeDataDir(dir)
  }
})

test('with accounts.encryption_key in the config no key file is made, and secrets seal under that key', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-env-config-'))
  const config = join(dir, 'agentd.json')
  writeFileSync(config, JSON.stringify({ accounts: { encryption_key: randomBytes(32).toString('base64') } }))
  try {
    await using app = await makeTestApp({ AGENTD_CONFIG: config })
    expect(existsSync(join(app.dir, 'encryption.key'))).toBe(false)
    await app.secrets.set(app.project.id, 'CONFIGURED', 'a value')
    expect(await app.secrets.values(app.project.id)).toEqual({ CONFIGURED: 'a value' })
  } finally {
    await removeDataDir(dir)
  }
})
