import { afterAll, beforeAll, expect, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { clientTypes } from '../../scripts/client'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * The clients of clients/: the typed TypeScript client's types are those of the live OpenAPI
 * document (and `tsc` compiles the CLI against them in npm test); the `agentd` CLI drives a real
 * server over HTTP.
 */
const root = join(import.meta.dir, '..', '..')
let t: TestApp
let base: string

beforeAll(async () => {
  t = await makeTestApp()
  base = t.listen()
})
afterAll(() => t?.[Symbol.asyncDispose]())

async function agentd(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const proc = Bun.spawn([process.execPath, join(root, 'clients/cli/agentd.ts'), ...args], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', AGENTD_URL: base, AGENTD_TOKEN: t.admin.token, AGENTD_ORG: 'acme' },
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { code, out, err }
}

test('the typed client’s schema.d.ts is what openapi-typescript makes of the live document', async () => {
  const live = await json(await t.app.handle(req('GET', '/openapi.json')))
  expect(await clientTypes(live)).toBe(readFileSync(join(root, 'clients/typescript/schema.d.ts'), 'utf8'))
})

test('agentd --help documents every command', async () => {
  const help = await agentd('--help')
  expect(help.code).toBe(0)
  for (const command of ['run', 'follow', 'send', 'pause', 'resume', 'cancel', 'search', 'keys'])
    expect(help.out).toMatch(new RegExp(`^  ${command}\\b`, 'm'))
  const bad = await agentd('nonsense')
  expect(bad.code).toBe(2)
})

test('agentd run --follow shows status, the tool call, tokens and cost, and exits 0 with the answer', async () => {
  const run = await agentd(
    'run',
    '--agent',
    'harness_2',
    '--follow',
    script([{ bash: 'echo from-the-cli' }, { answer: 'followed to the end' }]),
  )
  expect({ code: run.code, err: run.err }).toEqual({ code: 0, err: '' })
  const lines = run.out.trim().split('\n')
  expect(lines[0]).toMatch(/^[0-9a-f-]{36} (queued|allocating)$/)
  expect(lines).toContain('status: running')
  expect(lines.some((l) => l.startsWith('tool: ') && l.includes('echo from-the-cli'))).toBe(true)
  expect(lines.some((l) => /^done: completed · \d+ tokens · \$0\.0000$/.test(l))).toBe(true)
  expect(lines.at(-1)).toBe('followed to the end')
  const id = lines[0]!.split(' ')[0]!
  const found = await agentd('search', '--json')
  expect(JSON.parse(found.out).sessions.map((s: { id: string }) => s.id)).toContain(id)
}, 60_000)

test('send, cancel, follow of a cancelled run (exit 1), keys, and an API refusal (exit 3)', async () => {
  const started = await agentd('run', '--agent', 'harness_2', script([{ sleep: 20_000 }, { answer: 'never' }]))
  const id = started.out.split(' ')[0]!
  // A message is taken once the run has started (before, it is 409).
  await waitFor(
    async () => t.store.get(id)?.status,
    (status) => status === 'running',
  )
  expect((await agentd('send', id, 'one more thing')).out.trim()).toMatch(/^(sent|queued at 1)$/)
  expect(await agentd('cancel', id)).toMatchObject({ code: 0, out: 'cancel: cancelled\n' })
  expect((await agentd('follow', id)).code).toBe(1)
  await t.app.handle(req('POST', '/o/acme/api-keys', { token: t.admin.token, body: { name: 'cli-key' } }))
  const keys = await agentd('keys')
  expect(keys.out).toContain('cli-key')
  const refused = await agentd('cancel', '00000000-0000-0000-0000-000000000000')
  expect(refused.code).toBe(3)
  expect(refused.out).toContain('not found')
}, 60_000)
