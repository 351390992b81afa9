import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
})
afterAll(() => t[Symbol.asyncDispose]())

const call = (method: string, path: string, body?: unknown) => t.app.handle(req(method, path, { token: t.admin.token, body }))
const names = ['notes.txt', 'data.json', 'page.html', 'b.csv', 'a.md', 'image.svg', 'seventh.txt', 'eighth.bin']

describe('artifacts', () => {
  test('a run producing 8 files: all 8 in upload order, the first 6 on the session, exact bytes and type', async () => {
    const steps = names.map((name, i) => ({ artifact: { name, content: `content ${i} of ${name}\n` } }))
    const created = await json(
      await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: script([...steps, { answer: 'made 8' }]) }),
    )
    const id = created.execution_id
    const session = await waitFor(
      () => call('GET', `/o/acme/p/_/sessions/${id}`).then(json),
      (s) => s.status === 'completed',
    )
    expect(session.artifact_count).toBe(8)
    expect(session.artifacts.map((a: { name: string }) => a.name)).toEqual(names.slice(0, 6))

    const list = await json(await call('GET', `/o/acme/p/_/sessions/${id}/artifacts`))
    expect(list.execution_id).toBe(id)
    expect(list.artifacts.map((a: { name: string }) => a.name)).toEqual(names)
    expect(list.artifacts[1]).toEqual({ name: 'data.json', size: 'content 1 of data.json\n'.length, content_type: 'application/json' })

    for (const [i, name] of names.entries()) {
      const res = await call('GET', `/o/acme/p/_/sessions/${id}/artifacts/${name}`)
      expect(res.status).toBe(200)
      expect(await res.text()).toBe(`content ${i} of ${name}\n`)
      expect(res.headers.get('content-type')).toStartWith(list.artifacts[i].content_type)
    }
    expect((await call('GET', `/o/acme/p/_/sessions/${id}/artifacts/nope.txt`)).status).toBe(404)
  })

  test('a later turn adds new files after the old ones and updates changed ones', async () => {
    const created = await json(
      await call('POST', '/o/acme/p/_/sessions', {
        agent: 'harness_2',
        prompt: script([{ artifact: { name: 'one.txt', content: 'v1' } }, { answer: 'ok' }]),
      }),
    )
    const id = created.execution_id
    await waitFor(
      () => call('GET', `/o/acme/p/_/sessions/${id}`).then(json),
      (s) => s.status === 'completed',
    )
    await call('POST', `/o/acme/p/_/sessions/${id}/messages`, {
      content: script([
        { artifact: { name: 'two.txt', content: 'new' } },
        { artifact: { name: 'one.txt', content: 'v2' } },
        { answer: 'ok' },
      ]),
    })
    await waitFor(
      () => call('GET', `/o/acme/p/_/sessions/${id}`).then(json),
      (s) => s.status === 'completed' && s.turns_count === 2,
    )
    const list = await json(await call('GET', `/o/acme/p/_/sessions/${id}/artifacts`))
    expect(list.artifacts.map((a: { name: string }) => a.name)).toEqual(['one.txt', 'two.txt'])
    expect(await (await call('GET', `/o/acme/p/_/sessions/${id}/artifacts/one.txt`)).text()).toBe('v2')
  })

  test('a session without artifacts lists none; another org’s session is 404', async () => {
    const created = await json(await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: 'hello' }))
    expect(await json(await call('GET', `/o/acme/p/_/sessions/${created.execution_id}/artifacts`))).toEqual({
      execution_id: created.execution_id,
      artifacts: [],
    })
    expect((await call('GET', '/o/acme/p/_/sessions/00000000-0000-0000-0000-000000000000/artifacts')).status).toBe(404)
  })
})

test('the org-wide search row shows the first 6 artifacts and the count', async () => {
  const steps = names.map((name, i) => ({ artifact: { name, content: `${i}` } }))
  const created = await json(
    await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: `Artifact search\n${script([...steps, { answer: 'ok' }])}` }),
  )
  await waitFor(
    () => call('GET', `/o/acme/p/_/sessions/${created.execution_id}`).then(json),
    (s) => s.status === 'completed',
  )
  const row = await json(await call('GET', `/o/acme/sessions?selector=${created.execution_id}`))
  expect(row.artifact_count).toBe(8)
  expect(row.artifacts.map((a: { name: string }) => a.name)).toEqual(names.slice(0, 6))
})
