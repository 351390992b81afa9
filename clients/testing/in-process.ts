import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createDriver } from '../../sandbox'
import { loadConfig } from '../../src/config'
import { sandboxScope, startServices } from '../../src/server'
import { removeDataDir, sweepScope } from './data-dir'

/** What `startAgentd` takes (contract section 13). */
export interface TestingOptions {
  /** The sandbox driver: `process` (default: milliseconds a start), `bwrap` or `gvisor` (root). */
  sandbox?: 'process' | 'bwrap' | 'gvisor'
  /** The org made for the test (default `test`). */
  org?: string
  /** More of agentd's environment (contract section 1), e.g. AGENTD_TIME_SCALE. */
  env?: Record<string, string>
  /** agentd's own log lines (default: none). */
  log?: (line: string) => void
}

/** A started agentd, as the process that runs it knows it. */
export interface StartedAgentd {
  url: string
  /** The admin's bearer token. */
  token: string
  org: string
  /** An API key of the org (runs:read, runs:write), for a server-side caller; its id names it (`PATCH …/api-keys/{id}`: its webhook). */
  apiKey: string
  apiKeyId: string
  stop(): Promise<void>
}

/**
 * A whole agentd in this Bun process: its own temporary DATA_DIR, the scripted model (no provider
 * configured), the chosen driver, an org with an admin and an API key, listening on a free port
 * of 127.0.0.1. Webhooks may go to local receivers (AGENTD_WEBHOOK_ALLOW_PRIVATE), as a test's are.
 */
export async function startInProcess(options: TestingOptions = {}): Promise<StartedAgentd> {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-testing-'))
  const kind = options.sandbox ?? 'process'
  const log = options.log ?? (() => {})
  const driver = createDriver(kind, log, { scope: sandboxScope(dir) })
  let services: Awaited<ReturnType<typeof startServices>> | null = null
  let server: { stop(closeActive?: boolean): Promise<void> | void } | null = null
  const stop = async () => {
    await server?.stop(true)
    await services?.close()
    await sweepScope(driver)
    await removeDataDir(dir)
  }
  try {
    const config = loadConfig({
      DATA_DIR: dir,
      HOST: '127.0.0.1',
      PORT: '0',
      AGENTD_SANDBOX: kind,
      AGENTD_WARM_SANDBOXES: '0',
      AGENTD_WEBHOOK_ALLOW_PRIVATE: '1',
      ...options.env,
    })
    services = await startServices(config, { driver, log })
    await services.ready
    const org = options.org ?? 'test'
    services.identity.createOrg(org)
    const admin = services.identity.createUser(org, `admin@${org}.test`, 'admin')
    const key = await services.app.handle(
      new Request(`http://agentd/o/${org}/api-keys`, {
        method: 'POST',
        headers: { authorization: `Bearer ${admin.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'agentd/testing' }),
      }),
    )
    if (key.status !== 201) throw new Error(`agentd/testing: the API key could not be made (${key.status}: ${await key.text()})`)
    const listening = services.app.listen({ hostname: '127.0.0.1', port: 0 })
    server = listening.server
    const url = `http://127.0.0.1:${listening.server!.port}`
    const made = (await key.json()) as { id: string; secret: string }
    return { url, token: admin.token, org, apiKey: made.secret, apiKeyId: made.id, stop }
  } catch (err) {
    await stop()
    throw err
  }
}
