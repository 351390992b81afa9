import { afterAll, beforeAll, expect, test } from 'bun:test'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * Warm sandboxes on gVisor (AGENTD_WARM_SANDBOXES=1): a session takes a sandbox booted before it
 * was created, and the pool boots the next. Two Projects with different setups and secrets, one
 * after the other: the second Project's session gets a warm sandbox too, and finds nothing of the
 * first's there (its setup's file, its agent's file in /tmp, its background process, its secret).
 */
let t: TestApp
const SECRET_A = 'warm-secret-a-51c0'
const SECRET_B = 'warm-secret-b-93d7'

const admin = (method: string, path: string, body?: unknown) =>
  t.app.handle(req(method, path, { token: t.admin.token, ...(body !== undefined ? { body } : {}) }))

beforeAll(async () => {
  t = await makeTestApp({ AGENTD_SANDBOX: 'gvisor', AGENTD_WARM_SANDBOXES: '1' })
  for (const [name, secret, setup] of [
    ['alpha', SECRET_A, 'echo "$A_TOKEN" > "$HOME/alpha-setup"'],
    ['beta', SECRET_B, null],
  ] as const) {
    t.identity.createProject('acme', name, null)
    const variable = name === 'alpha' ? 'A_TOKEN' : 'B_TOKEN'
    expect((await admin('PUT', `/o/acme/projects/${name}/secrets/${variable}`, { value: secret })).status).toBe(204)
    expect((await admin('PUT', `/o/acme/projects/${name}/environment`, { setup })).status).toBe(200)
  }
})
afterAll(async () => {
  await t?.[Symbol.asyncDispose]()
}, 180_000)

/** Starts a session in `project` once a warm sandbox is booted; its id and when it was created. */
async function startWarm(project: string, steps: unknown[]): Promise<{ id: string; createdAt: number }> {
  await waitFor(
    async () => t.warm.booted,
    (booted) => booted === 1,
    60_000,
  )
  const createdAt = Date.now()
  const res = await admin('POST', `/o/acme/p/${project}/sessions`, { agent: 'harness_1', prompt: script(steps) })
  expect(res.status).toBe(202)
  return { id: (await json(res)).execution_id as string, createdAt }
}

const settled = (id: string) =>
  waitFor(
    async () => t.store.get(id)!,
    (row) => row.turnsCount >= 1 && !['queued', 'allocating', 'running'].includes(row.status),
    120_000,
  )

/** When the session's gVisor sandbox was booted (its record is written at each boot). */
const bootedAt = (id: string) => statSync(join(t.dir, 'sandboxes', id, 'sandbox', 'sandbox.json')).mtimeMs

/** The output of the session's shell calls, from its transcript. */
async function shellOutput(project: string, id: string): Promise<string> {
  const { events } = await json(await admin('GET', `/o/acme/p/${project}/sessions/${id}/messages`))
  return (events as { type: string; output?: string }[])
    .filter((e) => e.type === 'tool_result')
    .map((e) => e.output ?? '')
    .join('\n')
}

test("each session takes a sandbox booted before it was created; the next Project's finds nothing of the previous one's", async () => {
  expect(t.warm.size).toBe(1)
  const alpha = await startWarm('alpha', [
    { bash: 'echo "$A_TOKEN" > /tmp/alpha-tmp; (setsid sleep 997 </dev/null >/dev/null 2>&1 &); echo plan""-ted' },
    { answer: 'planted' },
  ])
  const alphaRow = await settled(alpha.id)
  expect(alphaRow.status, alphaRow.error ?? '').toBe('completed')
  expect(bootedAt(alpha.id)).toBeLessThan(alpha.createdAt)
  expect(await shellOutput('alpha', alpha.id)).toContain('plan-ted')

  // Each marker is split by quotes in the command, so only the command's output can hold it whole.
  const checks = [
    'test -e "$HOME/alpha-setup" && echo LEA""K-setup-file',
    'test -e /tmp/alpha-tmp && echo LEA""K-tmp-file',
    'ps -eo args | grep -q "[s]leep 997" && echo LEA""K-process',
    '[ -n "$A_TOKEN" ] && echo LEA""K-secret',
    '[ -n "$B_TOKEN" ] && echo own""-secret-here',
    'echo che""cked',
  ].join('; ')
  const beta = await startWarm('beta', [{ bash: checks }, { answer: 'checked' }])
  const betaRow = await settled(beta.id)
  expect(betaRow.status, betaRow.error ?? '').toBe('completed')
  expect(bootedAt(beta.id)).toBeLessThan(beta.createdAt)
  const out = await shellOutput('beta', beta.id)
  expect(out).toContain('own-secret-here')
  expect(out).toContain('checked')
  expect(out).not.toContain('LEAK-')
  // The sandboxes are the sessions' own: neither id was ever another session's, and the pool made each afresh.
  expect(beta.id).not.toBe(alpha.id)
  const folders = readdirSync(join(t.dir, 'sandboxes')).filter((name) => !name.startsWith('.'))
  expect(folders).toContain(alpha.id)
  expect(folders).toContain(beta.id)
}, 300_000)

test('a session cancelled while queued takes its warm sandbox with it: no folder, no container left', async () => {
  t.plans.setPlan('acme', { maxConcurrent: 1 })
  try {
    const running = await startWarm('beta', [{ sleep: 3000 }, { answer: 'held the slot' }])
    await waitFor(
      async () => t.store.get(running.id)!.status,
      (status) => status === 'running',
      60_000,
    )
    const queued = await startWarm('beta', [{ answer: 'never runs' }])
    expect(t.store.get(queued.id)!.status).toBe('queued')
    // Its sandbox was booted for it before the create, under its id.
    expect(bootedAt(queued.id)).toBeLessThan(queued.createdAt)
    expect((await admin('PATCH', `/o/acme/p/beta/sessions/${queued.id}`, { status: 'cancelled' })).status).toBe(200)
    await waitFor(
      async () => existsSync(join(t.dir, 'sandboxes', queued.id)),
      (exists) => !exists,
      30_000,
    )
    await settled(running.id)
    // Its container goes too: runsc's own delete (in the background, over a second on Debian's build) ends.
    await waitFor(
      async () => Bun.spawnSync(['ps', '-eo', 'args']).stdout.toString(),
      (processes) => !processes.includes(queued.id),
      30_000,
    )
  } finally {
    t.plans.setPlan('acme', { maxConcurrent: 4 })
  }
}, 180_000)
