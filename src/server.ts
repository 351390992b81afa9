import { createDriver, type SandboxDriver } from '../sandbox'
import { createApp } from './app'
import type { Config } from './config'
import { openDb } from './db/client'
import { startGateway } from './gateway/gateway'
import { ADAPTERS } from './harness'
import { AuthService } from './services/auth'
import { installedVersion, loadCatalog } from './services/catalog'
import { GatewaySessions } from './services/gateway-sessions'
import { IdentityService } from './services/identity'
import { OidcVerifier } from './services/oidc'
import type { HarnessVersions } from './services/session-create'
import { SessionService } from './services/session-service'

export interface ServerOptions {
  /** Overrides the driver picked from config (tests inject the process driver). */
  driver?: SandboxDriver
  now?: () => number
  log?: (line: string) => void
}

/**
 * Wires the whole service: database, gateway, sandbox driver, services and the HTTP app.
 * Rehydrates every live session before returning, so the app answers with settled states.
 */
export async function startServices(config: Config, options: ServerOptions = {}) {
  const now = options.now ?? Date.now
  const log = options.log ?? ((line: string) => console.error(line))
  const database = openDb(config.dbPath)
  const catalog = loadCatalog(config.configFile)

  const adapters = ADAPTERS
  const runnable: HarnessVersions = {}
  for (const harness of catalog.harnesses) {
    const version = installedVersion(harness.package)
    if (version && adapters[harness.id]) runnable[harness.id] = version
  }

  const gatewaySessions = new GatewaySessions()
  const gateway = await startGateway({
    resolve: (token) => gatewaySessions.resolve(token),
    onUsage: (usage) => gatewaySessions.record(usage),
  })
  const driver = options.driver ?? createDriver(config.sandbox, log)
  const identity = new IdentityService(database.db, now)
  const auth = new AuthService(identity, config.oidcIssuer ? new OidcVerifier(config.oidcIssuer, config.oidcAudience) : null)
  const sessions = new SessionService({
    db: database.db,
    catalog,
    adapters,
    versions: runnable,
    driver,
    gatewayUrl: gateway.url,
    gatewaySessions,
    dataDir: config.dataDir,
    defaultMaxConcurrent: config.defaultMaxConcurrent,
    now,
    log,
  })
  sessions.rehydrate()
  const app = createApp({ auth, sessions, catalog, runnable, now })

  return {
    app,
    identity,
    sessions,
    gateway,
    driver,
    async close() {
      await sessions.shutdown()
      await gateway.stop()
      database.close()
    },
  }
}

