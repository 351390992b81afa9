import { removeDataDir, sweepScope } from './cleanup'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createDriver } from '../../sandbox'
import { ProcessDriver } from '../../sandbox/process'
import { loadConfig } from '../../src/config'
import { sandboxScope, startServices, type ServerOptions } from '../../src/server'

export type TestApp = Awaited<ReturnType<typeof makeTestApp>>

/**
 * A whole agentd in-process on a temp DATA_DIR: real SQLite, real gateway, the process sandbox
 * driver, and an org `acme` with an admin and a member. Dispose it with `await using`.
 */
export async function makeTestApp(env: Record<string, string> = {}, options: ServerOptions = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-test-'))
  // No warm sandboxes unless a test asks (test/e2e/warm-sandboxes.test.ts): most apps here run no session on gVisor.
  const config = loadConfig({ DATA_DIR: dir, AGENTD_WARM_SANDBOXES: '0', ...env })
  // AGENTD_SANDBOX=gvisor|bwrap gives the app that real driver; otherwise the process driver.
  const driver =
    options.driver ??
    (config.sandbox && config.sandbox !== 'process'
      ? createDriver(config.sandbox, () => {}, { scope: sandboxScope(dir) })
      : new ProcessDriver({ scope: sandboxScope(dir) }))
  let services: Awaited<ReturnType<typeof startServices>>
  try {
    // AGENTD_TEST_LOG=1 prints the in-process server's own log; otherwise only what a slow stop waits for.
    const log = (line: string) => {
      if (process.env.AGENTD_TEST_LOG || line.startsWith('agentd: the stop waits')) console.error(`[agentd ${dir}] ${line}`)
    }
    services = await startServices(config, { log, ...options, driver })
  } catch (err) {
    // A start the test expects to fail (a bad config file) leaves no DATA_DIR behind.
    await removeDataDir(dir)
    throw err
  }
  await services.ready
  const org = services.identity.createOrg('acme')
  const admin = services.identity.createUser('acme', 'admin@acme.test', 'admin')
  const member = services.identity.createUser('acme', 'member@acme.test', 'member')
  // Bound to no repository: without a GitHub App, a Project bound to one answers 403 INSTALLATION_NOT_LINKED.
  const project = services.identity.createProject('acme', 'web', null)
  let listening: { stop(): unknown } | null = null
  return {
    ...services,
    /** Starts a real listening server on `port` (a free one by default), for streams; stopped with the app. */
    listen(port = 0): string {
      const app = services.app.listen({ hostname: '127.0.0.1', port })
      listening = app.server!
      return `http://127.0.0.1:${app.server!.port}`
    },
    dir,
    config,
    org,
    admin,
    member,
    project,
    async [Symbol.asyncDispose]() {
      listening?.stop()
      await services.close()
      await sweepScope(driver)
      await removeDataDir(dir) // with any disk the sweep did not take (spares, a driver of another scope)
    },
  }
}
