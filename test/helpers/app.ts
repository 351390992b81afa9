import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../../sandbox/process'
import { loadConfig } from '../../src/config'
import { startServices } from '../../src/server'

export type TestApp = Awaited<ReturnType<typeof makeTestApp>>

/**
 * A whole agentd in-process on a temp DATA_DIR: real SQLite, real gateway, the process sandbox
 * driver, and an org `acme` with an admin and a member. Dispose it with `await using`.
 */
export async function makeTestApp(env: Record<string, string> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-test-'))
  const config = loadConfig({ DATA_DIR: dir, ...env })
  const services = await startServices(config, { driver: new ProcessDriver(), log: () => {} })
  const org = services.identity.createOrg('acme')
  const admin = services.identity.createUser('acme', 'admin@acme.test', 'admin')
  const member = services.identity.createUser('acme', 'member@acme.test', 'member')
  const project = services.identity.createProject('acme', 'web', 'acme/web')
  return {
    ...services,
    dir,
    config,
    org,
    admin,
    member,
    project,
    async [Symbol.asyncDispose]() {
      await services.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
