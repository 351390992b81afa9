import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { startGithubApp, type GithubApp } from '../helpers/github-app'
import { json, req } from '../helpers/http'

/** Projects over HTTP: listed for members, made by admins, bound to one of the org's installations. */
let host: GithubApp
let t: TestApp
beforeAll(async () => {
  host = await startGithubApp()
  host.github.installations.set(7, { account: 'acme', repositories: ['acme/api'], suspended: false })
  host.github.installations.set(8, { account: 'acme-labs', repositories: ['acme-labs/tool'], suspended: false })
  t = await makeTestApp(host.env)
})
afterAll(async () => {
  await t?.[Symbol.asyncDispose]()
  host.stop()
})

const call = (method: string, path: string, token: string, body?: unknown) =>
  t.app
    .handle(req(method, path, { token, ...(body === undefined ? {} : { body }) }))
    .then(async (res) => ({ status: res.status, body: await json(res) }))

test("members list the org's Projects; admins create one on a repository, bound or not to an installation; every bad input is a clear 4xx", async () => {
  expect(await call('GET', '/o/acme/projects', t.member.token)).toEqual({
    status: 200,
    body: { data: [{ id: t.project.id, name: 'web', repository: null, github_installation: null, created_at: expect.any(String) }] },
  })
  expect((await call('POST', '/o/acme/projects', t.member.token, { name: 'api' })).status).toBe(403)
  const api = await call('POST', '/o/acme/projects', t.admin.token, { name: 'api', repository: 'https://github.com/acme/api.git' })
  expect(api).toEqual({
    status: 201,
    body: { id: expect.any(String), name: 'api', repository: 'acme/api', github_installation: null, created_at: expect.any(String) },
  })
  expect((await call('POST', '/o/acme/projects', t.admin.token, { name: 'api' })).status).toBe(409)
  for (const body of [{ name: '_' }, { name: 'has space' }, { name: 'x', repository: 'not a repo' }, { name: 'x', extra: 1 }, {}]) {
    const answer = await call('POST', '/o/acme/projects', t.admin.token, body)
    expect({ body, status: answer.status, error: typeof answer.body.error }).toEqual({ body, status: 400, error: 'string' })
  }
  expect(
    await call('POST', '/o/acme/projects', t.admin.token, { name: 'x', repository: 'acme/api', github_installation: '7' }),
  ).toMatchObject({ status: 422, body: { code: 'INSTALLATION_NOT_LINKED' } })
  // Linked (by the operator), an installation binds: its runs go through that one alone.
  const seven = await t.installations.link(t.org.id, 7)
  await t.installations.link(t.org.id, 8)
  const bound = await call('POST', '/o/acme/projects', t.admin.token, {
    name: 'tool',
    repository: 'acme-labs/tool',
    github_installation: '7',
  })
  expect(bound).toMatchObject({ status: 201, body: { repository: 'acme-labs/tool', github_installation: seven.id } })
  // acme-labs/tool is in installation 8, also the org's, but not in the one the Project is bound to.
  expect(await call('POST', '/o/acme/p/tool/sessions', t.admin.token, { agent: 'harness_1', prompt: 'x' })).toMatchObject({
    status: 403,
    body: { code: 'REPO_NOT_IN_INSTALLATION' },
  })
  expect((await call('GET', '/o/acme/projects', t.member.token)).body.data.map((p: { name: string }) => p.name)).toEqual([
    'api',
    'tool',
    'web',
  ])
})
