// agentd/testing as a user's `node --test` suite uses it (contract section 13): under Node the
// server runs in a Bun child process that startAgentd controls. Run by test/clients/testing-node.test.ts.
import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import { readdirSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { test } from 'node:test'
import { startAgentd } from 'agentd/testing'

const script = (steps) => `Do the task.\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\``
const until = async (read, done, ms = 30_000) => {
  for (const deadline = Date.now() + ms; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
    const value = await read()
    if (done(value)) return value
  }
  throw new Error('timed out')
}
const ours = () => readdirSync(tmpdir()).filter((name) => name.startsWith('agentd-testing-'))
const children = () =>
  readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes('clients/testing/child.ts')
      } catch {
        return false
      }
    })

test('startAgentd() under node --test: create, follow-up, a webhook to a local receiver; stop() leaves nothing', async () => {
  const before = ours()
  const hooks = []
  const receiver = createServer((req, res) => {
    let body = ''
    req.on('data', (c) => (body += c))
    req.on('end', () => {
      hooks.push({ headers: req.headers, body })
      res.end('ok')
    })
  })
  await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve))
  const started = performance.now()
  const agentd = await startAgentd()
  console.log(`agentd/testing under node --test: ready in ${(performance.now() - started).toFixed(0)} ms`)
  const url = agentd.url
  try {
    const key = await agentd.client.PATCH('/o/{org}/api-keys/{key}', {
      params: { path: { org: agentd.org, key: agentd.apiKeyId } },
      body: { webhook_url: `http://127.0.0.1:${receiver.address().port}/hook` },
    })
    assert.equal(key.response.status, 200)
    const call = (method, path, body) =>
      fetch(`${agentd.url}${path}`, {
        method,
        headers: { authorization: `Bearer ${agentd.apiKey}`, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      })
    const created = await call('POST', `/o/${agentd.org}/p/_/sessions`, { agent: 'harness_1', prompt: script([{ answer: 'first' }]) })
    assert.equal(created.status, 202)
    const { execution_id: id } = await created.json()
    const view = () =>
      agentd.client.GET('/o/{org}/p/{project}/sessions/{session}', { params: { path: { org: agentd.org, project: '_', session: id } } })
    await until(view, (v) => v.data?.status === 'completed')
    const followed = await call('POST', `/o/${agentd.org}/p/_/sessions/${id}/messages`, { content: script([{ answer: 'second' }]) })
    assert.ok([200, 202].includes(followed.status))
    await until(view, (v) => v.data?.status === 'completed' && v.data.turns_count === 2)
    await until(
      async () => hooks.length,
      (n) => n >= 2,
    )
    for (const hook of hooks) {
      assert.ok(hook.headers['webhook-signature'])
      assert.equal(JSON.parse(hook.body).data.run_id, id)
    }
  } finally {
    await agentd.stop()
    receiver.close()
  }
  await assert.rejects(fetch(`${url}/healthz`))
  assert.deepEqual(ours(), before)
  assert.deepEqual(children(), [])
})
