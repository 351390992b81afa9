import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { resolveHost } from '../../src/egress/address-policy'
import { makeTestApp, type TestApp } from '../helpers/app'
import { startGithubApp, type GithubApp } from '../helpers/github-app'
import { json, req, script, waitFor } from '../helpers/http'
import { startReceiver } from '../helpers/keys'
import { startNpmRegistry, type NpmRegistry } from '../helpers/npm-registry'
import { adminWith } from '../helpers/server'

/**
 * A Project's environment end to end, as a user would set one up: a repository (served by git's
 * own http-backend) whose package.json depends on a package published to a real npm registry
 * (Verdaccio, on loopback), whose test reads a secret. The Project's setup runs `npm ci` through
 * agentd's egress proxy, the agent's `npm test` passes, and the secret it prints reads `***` in
 * everything agentd stores or sends about the session. The next session starts from the prebuilt
 * image: the registry is not asked again.
 */
const INSTALLATION = 202
const SECRET = 'tok-7f3a9c1e-secret-value'
const PACKAGE = 'agentd-fixture-pad'
/** The name the sandbox reaches the registry by; the test's resolver says it is 127.0.0.1. */
const REGISTRY_HOST = 'registry.test'

let host: GithubApp
let registry: NpmRegistry
beforeAll(async () => {
  registry = await startNpmRegistry()
  await registry.publish(PACKAGE, '1.0.0', { 'index.js': 'module.exports = (s) => `[${s}]`\n' })
  const registryAt = `${REGISTRY_HOST}:${registry.port}`
  host = await startGithubApp()
  host.git.repo('acme', 'app', {
    'package.json': JSON.stringify(
      { name: 'app', version: '1.0.0', private: true, scripts: { test: 'node test.js' }, dependencies: { [PACKAGE]: '1.0.0' } },
      null,
      2,
    ),
    'package-lock.json': await registry.lockfile({ [PACKAGE]: '1.0.0' }, registryAt),
    '.npmrc': `registry=http://${registryAt}/\naudit=false\nfund=false\nupdate-notifier=false\n`,
    'test.js': [
      `const pad = require('${PACKAGE}')`,
      "if (pad('x') !== '[x]') { console.error('the dependency is wrong'); process.exit(1) }",
      "if (!process.env.APP_TOKEN) { console.error('no APP_TOKEN'); process.exit(1) }",
      "console.log('tests passed with token ' + process.env.APP_TOKEN)",
      '',
    ].join('\n'),
  })
  host.github.installations.set(INSTALLATION, { account: 'acme', repositories: ['acme/app'], suspended: false })
})
afterAll(async () => {
  host?.stop()
  await registry?.stop()
})

/** Names the test makes up resolve to loopback; the egress proxy resolves every name through this. */
const resolve = async (name: string) => (name === REGISTRY_HOST ? ['127.0.0.1'] : resolveHost(name))

for (const driver of ['bwrap', 'gvisor'] as const) {
  describe(`a Project environment on ${driver}`, () => {
    let t: TestApp
    let rx: ReturnType<typeof startReceiver>
    let key: string
    beforeAll(async () => {
      t = await makeTestApp(
        {
          AGENTD_SANDBOX: driver,
          ...host.env,
          AGENTD_EGRESS_ALLOW_PRIVATE: '1',
          AGENTD_WEBHOOK_ALLOW_PRIVATE: '1',
          AGENTD_TIME_SCALE: '0.005',
        },
        { resolveHost: resolve },
      )
      const linked = await adminWith(host.env, t.dir, 'github', 'link', '--org', 'acme', '--installation', String(INSTALLATION))
      expect(linked.json, linked.stderr).toMatchObject({ installation_id: INSTALLATION })
      t.identity.createProject('acme', 'app', 'acme/app')
      const admin = (method: string, path: string, body?: unknown) =>
        t.app.handle(req(method, path, { token: t.admin.token, ...(body !== undefined ? { body } : {}) }))
      expect((await admin('PUT', '/o/acme/projects/app/secrets/APP_TOKEN', { value: SECRET })).status).toBe(204)
      const env = await admin('PUT', '/o/acme/projects/app/environment', {
        setup: 'npm ci\necho "setup saw $APP_TOKEN"',
        network: { allow: [`${REGISTRY_HOST}:${registry.port}`] },
      })
      expect(env.status).toBe(200)
      // An API key whose runs post their turns' ends to a receiver: the webhook body is checked too.
      rx = startReceiver()
      const created = await json(await admin('POST', '/o/acme/api-keys', { name: 'ci' }))
      expect((await admin('PATCH', `/o/acme/api-keys/${created.id}`, { webhook_url: rx.url })).status).toBe(200)
      key = created.secret
    })
    afterAll(async () => {
      rx?.stop()
      await t?.[Symbol.asyncDispose]()
    })

    const settled = (id: string) =>
      waitFor(
        async () => t.store.get(id)!,
        (row) => row.turnsCount >= 1 && !['queued', 'allocating', 'running'].includes(row.status),
        240_000,
      )
    const start = async (steps: unknown[]) => {
      const res = await t.app.handle(
        req('POST', '/o/acme/p/app/sessions', { token: key, body: { agent: 'harness_1', prompt: script(steps) } }),
      )
      expect(res.status).toBe(202)
      return (await json(res)).execution_id as string
    }
    const read = async (id: string, what: string) =>
      json(await t.app.handle(req('GET', `/o/acme/p/app/sessions/${id}${what}`, { token: t.admin.token })))
    const tarballs = () => registry.requests().filter((line) => line.includes('.tgz')).length

    test("setup installs the dependency through the egress proxy; the agent's npm test passes; the secret reads *** in messages, trajectory, logs, result and the webhook body", async () => {
      const id = await start([{ bash: 'npm test' }, { answer: `npm test printed ${SECRET}` }])
      const row = await settled(id)
      const logs = (await read(id, '/logs')).logs as string
      expect(row.status, `${row.error}\n${logs}`).toBe('completed')
      expect(tarballs()).toBeGreaterThan(0)
      // The setup's lines, masked; then the image kept.
      expect(logs).toContain('setup: added 1 package')
      expect(logs).toContain('setup: setup saw ***')
      expect(logs).toMatch(/agentd: kept prebuilt image \S+/)
      // The agent's npm test ran against the installed package and saw the secret.
      const outputs = t.store
        .allEvents(id)
        .filter((e) => e.type === 'tool_result')
        .map((e) => String(e.data.output ?? ''))
      expect(outputs.join('\n')).toContain('tests passed with token ***')
      const result = await read(id, '/result')
      expect(JSON.stringify(result)).toContain('npm test printed ***')
      await waitFor(
        async () => rx.requests.filter((r) => r.body.includes(id)).length,
        (n) => n >= 1,
        30_000,
      )
      const everywhere = [
        JSON.stringify(await read(id, '/messages')),
        JSON.stringify(await read(id, '/trajectory')),
        JSON.stringify(await read(id, '/tool-calls')),
        // The caller's own prompt is kept as sent (the turn runs on it); all the session made is masked.
        JSON.stringify({ ...(await read(id, '')), prompt: null }),
        JSON.stringify(result),
        logs,
        ...rx.requests.filter((r) => r.body.includes(id)).map((r) => r.body),
        JSON.stringify(t.store.allEvents(id)),
        JSON.stringify(t.store.transcriptLines(id)),
      ]
      for (const text of everywhere) expect(text).not.toContain(SECRET)
      expect(everywhere.join('\n')).toContain('***')
    }, 300_000)

    test('the next session starts from the prebuilt image: the registry is not asked, node_modules is there, setup is not run', async () => {
      const before = tarballs()
      const asked = registry.requests().length
      const id = await start([
        { bash: "node -e \"console.log(require('fs').readdirSync('node_modules').join(' '))\"; npm test" },
        { answer: 'ok' },
      ])
      const row = await settled(id)
      const logs = (await read(id, '/logs')).logs as string
      expect(row.status, `${row.error}\n${logs}`).toBe('completed')
      expect(logs).toMatch(/setup: reused prebuilt image \S+/)
      expect(logs).not.toContain('setup: added')
      expect(registry.requests().length).toBe(asked)
      expect(tarballs()).toBe(before)
      const outputs = t.store
        .allEvents(id)
        .filter((e) => e.type === 'tool_result')
        .map((e) => String(e.data.output ?? ''))
      expect(outputs.join('\n')).toContain(PACKAGE)
      expect(outputs.join('\n')).toContain('tests passed with token ***')
    }, 300_000)

    test('a new secret value runs setup again; the value is in no file of the database in plaintext though setup and the agent printed it', async () => {
      if (driver !== 'bwrap') return // agentd's own keying: shown once
      const second = 'tok-0b7e55d2-second-value'
      expect(
        (await t.app.handle(req('PUT', '/o/acme/projects/app/secrets/APP_TOKEN', { token: t.admin.token, body: { value: second } })))
          .status,
      ).toBe(204)
      const id = await start([{ bash: 'npm test' }, { answer: 'ok' }])
      const row = await settled(id)
      const logs = (await read(id, '/logs')).logs as string
      expect(row.status, `${row.error}\n${logs}`).toBe('completed')
      expect(logs).toContain('setup: added 1 package')
      expect(logs).toContain('setup: setup saw ***')
      expect(logs).not.toContain('reused prebuilt image')
      t.store.events.flush()
      for (const file of [t.config.dbPath, `${t.config.dbPath}-wal`])
        expect(existsSync(file) && readFileSync(file).includes(second)).toBe(false)
    }, 300_000)

    test('a fork goes on through the egress proxy, and the secret its source was given stays masked after a rotation', async () => {
      const setSecret = async (value: string) =>
        expect(
          (await t.app.handle(req('PUT', '/o/acme/projects/app/secrets/APP_TOKEN', { token: t.admin.token, body: { value } }))).status,
        ).toBe(204)
      const given = `tok-${crypto.randomUUID()}`
      const rotated = `tok-${crypto.randomUUID()}`
      await setSecret(given)
      const id = await start([{ bash: 'echo "token $APP_TOKEN" > .token' }, { answer: 'ok' }])
      expect((await settled(id)).status).toBe('completed')
      await setSecret(rotated)
      const forked = await t.app.handle(req('POST', `/o/acme/p/app/sessions/${id}/fork`, { token: key }))
      expect(forked.status).toBe(202)
      const fork = (await json(forked)).execution_id as string
      const before = tarballs()
      const sent = await t.app.handle(
        req('POST', `/o/acme/p/app/sessions/${fork}/messages`, {
          token: key,
          body: { content: script([{ bash: 'cat .token; rm -rf node_modules "$HOME/.npm"; npm ci; npm test' }, { answer: 'ok' }]) },
        }),
      )
      expect(sent.status).toBe(200)
      const row = await settled(fork)
      const logs = (await read(fork, '/logs')).logs as string
      expect(row.status, `${row.error}\n${logs}`).toBe('completed')
      // The fork's sandbox reached the registry through its own egress proxy, under the Project's list.
      expect(tarballs()).toBeGreaterThan(before)
      const outputs = JSON.stringify(t.store.allEvents(fork))
      expect(outputs).toContain('tests passed with token ***')
      // The value the source was given is in the copied file: masked in the fork, though rotated since.
      expect(outputs).toContain('token ***')
      expect(outputs).not.toContain(given)
      expect(outputs).not.toContain(rotated)
    }, 300_000)
  })
}
