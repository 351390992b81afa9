/**
 * Prebuilt images benchmark (issue 32): how long until a Project's first turn really runs (create →
 * the CLI's first event), for a Project with no setup and for one whose setup (`npm ci` from a real
 * npm registry, Verdaccio on loopback, through the egress proxy) a prebuilt image already holds,
 * measured side by side in one run, alternating, on bubblewrap and gVisor. Also what the first
 * session paid: the setup itself and the copy of its disk into an image.
 * Goal (reported, never asserted): prebuilt ≤ 1.5 × no setup.
 *
 *   bun bench/prebuild.ts    (env: BENCH_PREBUILD_RUNS=5, BENCH_PREBUILD_DRIVERS=bwrap,gvisor)
 */
import { resolveHost } from '../src/egress/address-policy'
import { makeTestApp, type TestApp } from '../test/helpers/app'
import { startGithubApp } from '../test/helpers/github-app'
import { json, req, script, waitFor } from '../test/helpers/http'
import { startNpmRegistry } from '../test/helpers/npm-registry'
import { adminWith } from '../test/helpers/server'

const RUNS = Number(process.env.BENCH_PREBUILD_RUNS ?? 5)
const DRIVERS = (process.env.BENCH_PREBUILD_DRIVERS ?? 'bwrap,gvisor').split(',')
const PACKAGE = 'agentd-bench-pad'
const REGISTRY_HOST = 'registry.test'
const INSTALLATION = 303

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? Number.NaN
const ms = (value: number) => `${Math.round(value)} ms`

const registry = await startNpmRegistry()
await registry.publish(PACKAGE, '1.0.0', { 'index.js': 'module.exports = 1\n' })
const registryAt = `${REGISTRY_HOST}:${registry.port}`
const host = await startGithubApp()
host.git.repo('acme', 'app', {
  'package.json': JSON.stringify({ name: 'app', version: '1.0.0', private: true, dependencies: { [PACKAGE]: '1.0.0' } }),
  'package-lock.json': await registry.lockfile({ [PACKAGE]: '1.0.0' }, registryAt),
  '.npmrc': `registry=http://${registryAt}/\naudit=false\nfund=false\nupdate-notifier=false\n`,
})
host.github.installations.set(INSTALLATION, { account: 'acme', repositories: ['acme/app'], suspended: false })

/** Create → the CLI's first event, and the session's log, for one session of `project`. */
async function firstTurn(t: TestApp, project: string): Promise<{ ms: number; logs: { at: number; text: string }[] }> {
  const res = await t.app.handle(
    req('POST', `/o/acme/p/${project}/sessions`, {
      token: t.admin.token,
      body: { agent: 'harness_1', persistence: 'ephemeral', prompt: script([{ answer: 'ok' }]) },
    }),
  )
  const id = (await json(res)).execution_id as string
  const row = await waitFor(
    async () => t.store.get(id)!,
    (r) => !['queued', 'allocating', 'running'].includes(r.status),
    240_000,
  )
  if (row.status !== 'completed') throw new Error(`${project}: ${row.status} ${row.error}`)
  const events = t.store.allEvents(id)
  const first = events.find((e) => e.kind === 'harness')!
  return {
    ms: first.createdAt - row.createdAt,
    logs: events.filter((e) => e.kind === 'log').map((e) => ({ at: e.createdAt, text: String(e.data.text ?? '') })),
  }
}

try {
  for (const driver of DRIVERS) {
    const t = await makeTestApp(
      { AGENTD_SANDBOX: driver, ...host.env, AGENTD_EGRESS_ALLOW_PRIVATE: '1' },
      { resolveHost: async (name) => (name === REGISTRY_HOST ? ['127.0.0.1'] : resolveHost(name)) },
    )
    try {
      await adminWith(host.env, t.dir, 'github', 'link', '--org', 'acme', '--installation', String(INSTALLATION))
      // Two Projects on the same repository: one with no setup, one whose setup installs its dependency.
      t.identity.createProject('acme', 'plain', 'acme/app')
      t.identity.createProject('acme', 'app', 'acme/app')
      await t.app.handle(
        req('PUT', '/o/acme/projects/app/environment', {
          token: t.admin.token,
          body: { setup: 'npm ci', network: { allow: [registryAt] } },
        }),
      )
      const setupRun = await firstTurn(t, 'app')
      const at = (pattern: RegExp) => setupRun.logs.find((l) => pattern.test(l.text))?.at ?? Number.NaN
      const setupMs = at(/agentd: setup done/) - at(/agentd: setup started/)
      const copyMs = at(/agentd: kept prebuilt image/) - at(/agentd: setup done/)
      await firstTurn(t, 'plain') // warms the plain path's caches as the setup run warmed the other's
      const plain: number[] = []
      const prebuilt: number[] = []
      for (let i = 0; i < RUNS; i++) {
        plain.push((await firstTurn(t, 'plain')).ms)
        const reused = await firstTurn(t, 'app')
        if (!reused.logs.some((l) => l.text.includes('setup: reused prebuilt image'))) throw new Error('the prebuilt image was not reused')
        prebuilt.push(reused.ms)
      }
      const ratio = median(prebuilt) / median(plain)
      console.log(
        `${driver}: create → first turn running, median of ${RUNS}: no setup ${ms(median(plain))}, from the prebuilt image ${ms(median(prebuilt))}: ${ratio.toFixed(2)}x (goal ≤ 1.5x: ${ratio <= 1.5 ? 'met' : 'missed'})`,
      )
      console.log(
        `${driver}: the first session: create → first turn ${ms(setupRun.ms)}, of which setup (npm ci) ${ms(setupMs)} and the disk's copy into an image ${ms(copyMs)}`,
      )
      console.log(`${driver}: runs, no setup: ${plain.map(ms).join(', ')}; prebuilt: ${prebuilt.map(ms).join(', ')}`)
    } finally {
      await t[Symbol.asyncDispose]()
    }
  }
} finally {
  host.stop()
  await registry.stop()
}
