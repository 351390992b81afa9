import { afterAll, beforeAll, expect, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'

/** `agentd secrets …` and `agentd env …` against a real server: a secret's value goes in on stdin and never comes out. */
const root = join(import.meta.dir, '..', '..')
let t: TestApp
let base: string
let dir: string

beforeAll(async () => {
  t = await makeTestApp()
  base = t.listen()
  dir = mkdtempSync(join(tmpdir(), 'agentd-cli-env-'))
})
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true })
  await t?.[Symbol.asyncDispose]()
})

async function agentd(
  args: string[],
  options: { stdin?: string; token?: string } = {},
): Promise<{ code: number; out: string; err: string }> {
  const proc = Bun.spawn([process.execPath, join(root, 'clients/cli/agentd.ts'), ...args], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', AGENTD_URL: base, AGENTD_TOKEN: options.token ?? t.admin.token, AGENTD_ORG: 'acme' },
    stdin: options.stdin === undefined ? 'ignore' : new Blob([options.stdin]),
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { code, out, err }
}

test('agentd --help documents the secrets and env commands', async () => {
  const help = await agentd(['--help'])
  for (const command of ['secrets set', 'secrets list', 'secrets rm', 'env show', 'env set'])
    expect(help.out).toMatch(new RegExp(`^  ${command}\\b`, 'm'))
  expect((await agentd(['secrets', 'set', 'web'])).code).toBe(2)
  expect((await agentd(['secrets', 'frob', 'web'])).code).toBe(2)
  expect((await agentd(['env', 'show'])).code).toBe(2)
})

test('secrets set reads the value from stdin (or --value), list shows names only, rm removes; the value is never printed', async () => {
  const value = `cli-${randomBytes(12).toString('hex')}`
  expect(await agentd(['secrets', 'set', 'web', 'NPM_TOKEN'], { stdin: `${value}\n` })).toEqual({
    code: 0,
    out: 'set NPM_TOKEN\n',
    err: '',
  })
  expect(await t.secrets.values(t.project.id)).toEqual({ NPM_TOKEN: value })
  expect((await agentd(['secrets', 'set', 'web', 'OTHER', '--value', 'from-flag'])).code).toBe(0)
  expect((await t.secrets.values(t.project.id)).OTHER).toBe('from-flag')
  const listed = await agentd(['secrets', 'list', 'web'])
  expect(listed.code).toBe(0)
  expect(listed.out).toMatch(/^NPM_TOKEN \d{4}-\d\d-\d\dT[^\n]+\nOTHER \d{4}-[^\n]+\n$/)
  const json = await agentd(['secrets', 'list', 'web', '--json'])
  expect(JSON.parse(json.out).data.map((s: { name: string }) => s.name)).toEqual(['NPM_TOKEN', 'OTHER'])
  for (const output of [listed, json]) expect(output.out).not.toContain(value)
  // Refusals (exit 3) say why, and never quote the value.
  const reserved = await agentd(['secrets', 'set', 'web', 'LD_PRELOAD'], { stdin: value })
  expect(reserved.code).toBe(3)
  expect(reserved.out).toContain('VALIDATION_ERROR')
  expect(reserved.out + reserved.err).not.toContain(value)
  expect((await agentd(['secrets', 'list', 'web'], { token: t.member.token })).code).toBe(3)
  expect(await agentd(['secrets', 'rm', 'web', 'NPM_TOKEN'])).toEqual({ code: 0, out: 'removed NPM_TOKEN\n', err: '' })
  const gone = await agentd(['secrets', 'rm', 'web', 'NPM_TOKEN'])
  expect(gone.code).toBe(3)
  expect((await agentd(['secrets', 'list', 'nope'])).code).toBe(3)
  await agentd(['secrets', 'rm', 'web', 'OTHER'])
})

test('env show prints the environment; env set changes only what its options name', async () => {
  const shown = await agentd(['env', 'show', 'web'])
  expect(shown).toEqual({ code: 0, out: 'revision 0 (never set)\nsetup_timeout_s 900\nallow (none: no network)\nsetup (none)\n', err: '' })
  const script = join(dir, 'setup.sh')
  writeFileSync(script, 'npm ci\nnpm test\n')
  const set = await agentd([
    'env',
    'set',
    'web',
    '--setup-file',
    script,
    '--setup-timeout',
    '600',
    '--allow',
    'registries, api.example.com:443',
  ])
  expect(set.code).toBe(0)
  expect(set.out).toMatch(
    /^revision 1 \(updated [^)]+\)\nsetup_timeout_s 600\nallow registries, api\.example\.com:443\nsetup:\nnpm ci\nnpm test\n$/,
  )
  // Only the allow list changes; the setup and its timeout stay.
  expect((await agentd(['env', 'set', 'web', '--allow', '*.example.org'])).code).toBe(0)
  expect(t.environments.get(t.project.id)).toMatchObject({
    setup: 'npm ci\nnpm test\n',
    setup_timeout_s: 600,
    network: { allow: ['*.example.org'] },
    revision: 2,
  })
  // The setup from stdin; an empty one removes it; --allow '' empties the list.
  expect((await agentd(['env', 'set', 'web', '--setup-file', '-'], { stdin: 'make\n' })).code).toBe(0)
  expect(t.environments.get(t.project.id).setup).toBe('make\n')
  writeFileSync(script, '')
  const cleared = await agentd(['env', 'set', 'web', '--setup-file', script, '--allow', '', '--json'])
  expect(JSON.parse(cleared.out)).toMatchObject({ setup: null, setup_timeout_s: 600, network: { allow: [] }, revision: 4 })
  const bad = await agentd(['env', 'set', 'web', '--allow', 'not a host'])
  expect(bad.code).toBe(3)
  expect(bad.out).toContain('VALIDATION_ERROR')
  expect((await agentd(['env', 'set', 'web', '--setup-timeout', 'soon'])).code).toBe(2)
})
