import { expect, test } from 'bun:test'
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { startAgentd } from 'agentd/testing'
import { Webhook } from 'standardwebhooks'
import { script, waitFor } from '../helpers/http'
import { startReceiver } from '../helpers/keys'
import { openSse } from '../helpers/sse'

/**
 * agentd/testing as a user's `bun test` suite uses it (contract section 13): imported by the
 * package's name, in-process under Bun, the typed client bound to it; and after `stop()` nothing
 * of it is left: no listener, no process, no temporary folder.
 */

/** Temporary folders agentd/testing made, and live processes whose command line or folder is in one. */
function leftovers(): { folders: string[]; processes: string[] } {
  const folders = readdirSync(tmpdir()).filter((name) => name.startsWith('agentd-testing-'))
  const processes: string[] = []
  for (const pid of readdirSync('/proc').filter((entry) => /^\d+$/.test(entry))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')
      const cwd = readlinkSync(`/proc/${pid}/cwd`)
      if (folders.some((f) => cmdline.includes(f) || cwd.includes(f)) || cmdline.includes('clients/testing/child.ts'))
        processes.push(`${pid} ${cmdline}`)
    } catch {
      // gone meanwhile
    }
  }
  return { folders, processes }
}

test('startAgentd() under bun test: create, stream, follow-up and a signed webhook to a local receiver; stop() leaves nothing', async () => {
  const before = leftovers().folders
  const receiver = startReceiver()
  const started = performance.now()
  const agentd = await startAgentd()
  const readyMs = performance.now() - started
  let url = ''
  try {
    url = agentd.url
    expect(agentd.org).toBe('test')
    // The key's webhook goes to the test's own receiver (a local address: allowed here).
    const key = await agentd.client.PATCH('/o/{org}/api-keys/{key}', {
      params: { path: { org: agentd.org, key: agentd.apiKeyId } },
      body: { webhook_url: receiver.url },
    })
    expect(key.response.status).toBe(200)
    const secret = (key.data as { webhook_secret: string }).webhook_secret
    const call = (method: string, path: string, body?: unknown) =>
      fetch(`${agentd.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${agentd.apiKey}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      })
    const created = await call('POST', `/o/${agentd.org}/p/_/sessions`, {
      agent: 'harness_1',
      prompt: script([{ say: 'hello' }, { answer: 'first' }]),
    })
    expect(created.status).toBe(202)
    const id = ((await created.json()) as { execution_id: string }).execution_id
    const frames = await (await openSse(`${agentd.url}/o/${agentd.org}/p/_/sessions/${id}/events`, agentd.apiKey)).frames()
    expect(frames.at(-1)).toMatchObject({ event: 'done', data: { status: 'completed' } })
    // A follow-up on the same session, read back through the typed client.
    const followed = await call('POST', `/o/${agentd.org}/p/_/sessions/${id}/messages`, { content: script([{ answer: 'second' }]) })
    expect([200, 202]).toContain(followed.status)
    const view = await waitFor(
      async () =>
        (
          await agentd.client.GET('/o/{org}/p/{project}/sessions/{session}', {
            params: { path: { org: agentd.org, project: '_', session: id } },
          })
        ).data,
      (v) => v?.status === 'completed' && v.turns_count === 2,
      30_000,
    )
    expect(view?.turns_count).toBe(2)
    // One signed webhook per turn, each verifiable with the key's secret.
    await waitFor(
      async () => receiver.requests.length,
      (n) => n >= 2,
      30_000,
    )
    for (const hook of receiver.requests)
      expect(new Webhook(secret).verify(hook.body, hook.headers)).toMatchObject({ data: { run_id: id } })
  } finally {
    await agentd.stop()
    receiver.stop()
  }
  console.log(`agentd/testing under bun test: ready in ${readyMs.toFixed(0)} ms`)
  expect(
    await fetch(`${url}/healthz`).then(
      () => 'answered',
      () => 'closed',
    ),
  ).toBe('closed')
  const after = leftovers()
  expect(after.folders).toEqual(before)
  expect(after.processes).toEqual([])
}, 90_000)

test('`await using` stops it at the end of the scope; a second stop() is harmless', async () => {
  let url = ''
  {
    await using agentd = await startAgentd({ org: 'acme' })
    url = agentd.url
    expect((await agentd.client.GET('/healthz')).data).toMatchObject({ ok: true, ready: true })
    await agentd.stop() // and once more as the scope ends
  }
  expect(
    await fetch(`${url}/healthz`).then(
      () => 'answered',
      () => 'closed',
    ),
  ).toBe('closed')
})

// The README's example for `bun test`, as it is written there.
test('my bot starts a run and gets its answer', async () => {
  await using agentd = await startAgentd()
  const { data } = await agentd.client.POST('/o/{org}/p/{project}/sessions', {
    params: { path: { org: agentd.org, project: '_' } },
    body: { agent: 'harness_1', prompt: 'Do the task.\n```agentd-script\n[{"answer":"done"}]\n```' },
  })
  const session = { org: agentd.org, project: '_', session: data!.execution_id }
  let view = data
  while (view && ['queued', 'allocating', 'running'].includes(view.status)) {
    await Bun.sleep(50)
    view = (await agentd.client.GET('/o/{org}/p/{project}/sessions/{session}', { params: { path: session } })).data
  }
  expect(view?.status).toBe('completed')
})
