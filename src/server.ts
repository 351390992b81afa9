import { createHash } from 'node:crypto'
import { join } from 'node:path'
import { createDriver, type SandboxDriver } from '../sandbox'
import { createApp, type AppDeps } from './app'
import { type Config, warmSandboxCount } from './config'
import { openNode } from './region/node'
import { CATCH_UP_MS } from './region/forward'
import { startGateway } from './gateway/gateway'
import { ADAPTERS } from './harness'
import { ApiKeyService } from './api-keys/service'
import { AuthService } from './identity/auth'
import { loadCatalog, runnableVersions } from './catalog/catalog'
import { ArtifactStore } from './runtime/artifacts'
import { GatewaySessions } from './runtime/gateway-bindings'
import { ASK_AGAIN_MS, startedCliOf } from './runtime/started-cli'
import { HarnessInstaller } from './runtime/harness-install'
import { StartSlots } from './runtime/start-slots'
import { InFlightLimit } from './gateway/in-flight-limit'
import { fillNodeCompileCache } from './harness/node-runtime'
import { geminiEntryPath } from './harness/gemini'
import type { WarmSandboxes } from './runtime/warm-sandboxes'
import { SessionRuntime } from './runtime/session-runtime'
import type { LogFields } from './domain/log'
import { SessionSearch } from './search/service'
import { loadAccountsKey } from './accounts/config'
import { KeySealer } from './accounts/seal'
import { AccountService } from './accounts/service'
import { EnvironmentService } from './environments/environment'
import { SecretService } from './environments/secrets'
import { PrebuildService } from './environments/prebuilds'
import { sessionPorts } from './environments/session-ports'
import { EgressProxy } from './egress/proxy'
import { SecretMasks } from './session-record/masks'
import { removeInSandbox } from './runtime/environment'
import { ATTACHMENTS_DIR, FileService } from './files/service'
import { Metrics } from './metrics/metrics'
import { loadDefaultPlan } from './plans/config'
import { PlanService } from './plans/service'
import { AdmissionQueue } from './sessions/admission'
import { SessionQueries } from './sessions/queries'
import { SessionStore } from './session-record/store'
import { StatechartService } from './statechart/service'
import { ToolCallService } from './transcript/tool-calls'
import { TranscriptService } from './transcript/service'
import { IdentityService } from './identity/service'
import { OidcVerifier } from './identity/oidc'
import { loadProviders } from './gateway/providers'
import { SessionActor } from './sessions/actor'
import { SessionService } from './sessions/service'
import { resolveHost, type ResolveHost } from './egress/address-policy'
import { LokiLogs } from './transcript/loki'
import { SessionLogReader } from './transcript/logs'
import { AgentService } from './agents/service'
import { SkillFetcher } from './skills/fetch'
import { SkillService } from './skills/service'
import { connectionServices } from './connections/connectors'
import { proxyToolRequest } from './connections/proxy'
import { publicGetter } from './egress/public-get'
import { WebhookService } from './webhooks/service'
import { GithubApp } from './repositories/github'
import { InstallationService } from './repositories/installations'
import { ProjectService } from './projects/service'
import { RepositoryRuns } from './repositories/runs'
import { ChangesService } from './repositories/changes'
import type { SessionRow } from './session-record/store'
import type { SandboxHandle } from '../sandbox/driver'
import { proxyGitRequest } from './repositories/git-proxy'
import { startHousekeeping } from './housekeeping'

/** A short stable name for this DATA_DIR, used to scope cgroups and runtime files. */
export function sandboxScope(dataDir: string): string {
  return createHash('sha256').update(dataDir).digest('hex').slice(0, 12)
}

export interface ServerOptions {
  /** Overrides the driver picked from config (tests inject the process driver). */
  driver?: SandboxDriver
  now?: () => number
  /** Lines about one session carry its id as a field (main.ts writes them as JSON logs). */
  log?: (line: string, fields?: LogFields) => void
  /** Keepalive interval of idle event streams (tests shorten it). */
  sseKeepaliveMs?: number
  /** DNS for webhook URLs (tests answer with fixed addresses). */
  resolveHost?: ResolveHost
  /** How long a request waits for rehydration before a 503 (5 s; tests shorten it). */
  readyWaitMs?: number
  /** One entry per answered request (main.ts logs them as JSON). */
  requestLog?: AppDeps['requestLog']
}

/**
 * Wires the whole service: database, gateway, sandbox driver, services and the HTTP app. Starts
 * rehydrating the previous run's sessions and returns at once: `ready` settles when that is done,
 * and until then the app answers only /healthz (other requests wait, then get a 503).
 */
/** At a graceful stop, the least time the webhooks due (the last turns' ends) get to go out, even past AGENTD_SHUTDOWN_S. */
const WEBHOOK_FLUSH_MS = 2_000

/** What a turn's end hands the repository's publish: its gateway key and its deadline. */
type TurnPublish = { token: string; signal?: AbortSignal }

/** Tool server exchanges one session may have open at once through the egress proxy. */
const MCP_IN_FLIGHT = 16

export async function startServices(config: Config, options: ServerOptions = {}) {
  const now = options.now ?? Date.now
  const log =
    options.log ?? ((line: string, fields?: LogFields) => console.error(fields ? `agentd: session ${fields.session}: ${line}` : line))
  const { database, region, replica, changed: nodeChanged, stop: stopNode } = await openNode(config, now, log)
  const catalog = loadCatalog(config.configFile)

  const adapters = ADAPTERS
  const runnable = runnableVersions(catalog, adapters)

  const gatewaySessions = new GatewaySessions()
  // Read at each scrape: the store is made below, and a scrape only comes once the app serves.
  const metrics: Metrics = new Metrics({
    sessionsByStatus: () => store.countByStatus(),
    eventsWritten: () => store.events.written,
    capacity: config.capacity,
    runsc: () => driver.runscInfo ?? null,
    nodes: () => region.nodeStates(),
  })
  const providers = loadProviders(config.configFile)
  // Every sealed value's key: the config's, else the one generated in DATA_DIR at the first start.
  const accountsKey = loadAccountsKey(config.configFile, config.dataDir, log)
  const mcpInFlight = new InFlightLimit(MCP_IN_FLIGHT)
  const gateway = await startGateway({
    resolve: (token) => gatewaySessions.resolve(token),
    onUsage: (usage) => metrics.gatewayCall(usage, gatewaySessions.record(usage)),
    // Each model request: in the session's stored log, and in the server's own as one line with its session and turn.
    onLog: (session, line) => {
      runtime.log(session.sessionId, session.turn ?? 0, line, 'agentd')
      log(line.replace(/^\S+ /, ''), { session: session.sessionId, ...(session.turn !== undefined ? { turn: session.turn } : {}) })
    },
    providers,
    // A CLI started ahead in a warm sandbox asks for its session's first message (runtime/started-cli.ts).
    firstMessage: (key, signal) => runtime.firstMessage(key, signal),
    // The egress proxy: a session's CLI reaches its own tool servers, and only those, through here.
    mcp: async (session, name, req) => {
      // The slot first: a sandbox cannot pile up requests waiting on a connector's token refresh.
      const onDone = mcpInFlight.take(session.sessionId)
      if (!onDone) return Response.json({ error: `at most ${mcpInFlight.max} tool server requests at once` }, { status: 429 })
      const target = await connections.target(session.sessionId, name).catch((err: Error) => (onDone(), Promise.reject(err)))
      if (!target) onDone()
      return target && proxyToolRequest(req, target, { ...outbound, onDone })
    },
    // git from the sandbox: to the session's own repository only, with the code host's credential.
    git: (session, target, req) => {
      const row = store.get(session.sessionId)
      return proxyGitRequest(
        req,
        target,
        row && repositories ? RepositoryRuns.repositoryOf(row) : null,
        { baseUrl: config.githubGitUrl, token: () => (row && repositories ? repositories.token(row) : null) },
        // A push: to the session's own branch only.
        () => (row && repositories ? repositories.branchOf(row) : null),
      )
    },
  })
  const { maxSandboxes, maxStarting, basis } = config.capacity
  log(`agentd: host capacity: ${maxSandboxes} sandboxes at once, ${maxStarting} starting at once (${basis}); more wait queued`)
  // Sandboxes on this host are scoped to this DATA_DIR, so a sweep never touches another agentd's.
  // Its create, park and wake are timed for /metrics; everything else is the driver's own.
  const driver: SandboxDriver = metrics.timed(options.driver ?? createDriver(config.sandbox, log, { scope: sandboxScope(config.dataDir) }))
  const identity = new IdentityService(database.db, now)
  const webhooks = new WebhookService({
    db: database.db,
    publicUrl: config.publicUrl,
    allowPrivate: config.webhookAllowPrivate,
    timeScale: config.timeScale,
    now,
    log,
    onAttempt: (outcome) => metrics.webhookAttempt(outcome),
    ...(options.resolveHost ? { resolve: options.resolveHost } : {}),
  })
  const apiKeys = new ApiKeyService(database.db, webhooks, now, !replica)
  const oidc = config.oidc ? new OidcVerifier(config.oidc.issuer, config.oidc.audience) : null
  // On a replica, a credential made on the primary a moment ago is waited for, not refused.
  const auth = new AuthService(identity, oidc, apiKeys, replica ? () => region.catchUp(CATCH_UP_MS) : null)
  // Sessions: the store and the read side, the runtime that carries out the machine's actions, the
  // actor that feeds the machine (the runtime reports back to it), and the service callers talk to.
  const db = database.db
  // Secret values a session's sandbox was given are masked in all it stores (contract section 10).
  const store = new SessionStore(db, now, (id) => queries.forget(id), new SecretMasks(), replica)
  const search = new SessionSearch(db, now)
  const artifacts = new ArtifactStore(db, config.dataDir, now, config.artifactsMaxBytes)
  const installer = new HarnessInstaller(join(config.dataDir, 'harnesses'))
  const plans = new PlanService({ db, catalog, defaultPlan: loadDefaultPlan(config.configFile), now })
  const sealer = accountsKey && new KeySealer(accountsKey)
  const accounts = new AccountService({ db, sealer, catalog, providers, now })
  // A Project's environment and secrets (contract section 10): its sandboxes run in them.
  const environments = new EnvironmentService({ db, now })
  const secrets = new SecretService({ db, sealer: new KeySealer(accountsKey), now })
  const environmentPorts = sessionPorts({
    environments,
    secrets,
    prebuilds: new PrebuildService({ db, dataDir: config.dataDir, keep: config.prebuildsPerProject, now }),
    headCommit: (row) => repositories?.headCommit(row) ?? Promise.resolve(null),
    egress: new EgressProxy({ resolve: options.resolveHost ?? resolveHost, allowPrivate: config.egressAllowPrivate }),
    sessionLog: (id, line) => runtime.log(id, store.get(id)?.turnsCount ?? 0, line, 'agentd'),
  })
  const queue = new AdmissionQueue()
  const loki = config.lokiUrl ? new LokiLogs(config.lokiUrl, now, log) : null
  const files = new FileService({ db, unusedMs: config.unusedFileMs, quotaBytes: config.fileQuotaBytes, now })
  const agents = new AgentService({ db, catalog, versions: runnable, now })
  // Caller URLs (images, skills) are fetched under the webhook rules, each create's within its
  // budget (the signal); AGENTD_FETCH_CA_FILE adds a CA (tests only).
  const outbound = { resolve: options.resolveHost ?? resolveHost, allowPrivate: config.webhookAllowPrivate, ca: config.fetchCa }
  const get = publicGetter(outbound)
  const skills = new SkillService(db, new SkillFetcher({ githubApiUrl: config.githubApiUrl, githubToken: config.githubToken, get }))
  const { publicUrl, linearApiUrl } = config
  const { connections, connectors, trackers } = connectionServices({ ...outbound, db, sealer, catalog, publicUrl, linearApiUrl, now, log })
  // A run's repository (checkout, git through the gateway, pull requests) needs agentd's GitHub App.
  const github = config.githubApp ? new GithubApp(config.githubApiUrl, config.githubApp) : null
  const installations = new InstallationService(db, github, now)
  const repositories = github ? new RepositoryRuns(github, installations, config.githubGitUrl, driver) : null
  const queries = new SessionQueries({ db, store, search, artifacts, files, queue, now })
  const runtime: SessionRuntime = new SessionRuntime({
    store,
    adapters,
    catalog,
    driver,
    gateway: { host: '127.0.0.1', port: gateway.port },
    gatewaySessions,
    starts: new StartSlots(config.capacity.maxStarting),
    warmSandboxes: warmSandboxCount(config, driver.kind),
    startedCli: startedCliOf(config.warmCli, catalog, ASK_AGAIN_MS * config.timeScale),
    // A run on the caller's own provider account is not held to the plan's token and spend limits.
    turnTerms: async (row) =>
      row.accountId === null
        ? { standing: () => plans.meteredStanding(row.orgId), pricedModels: plans.allowsPriced(row.orgId) }
        : { standing: () => null, account: await accounts.providerFor(row.accountId) },
    installer,
    artifacts,
    mcpServers: (id) => connections.names(id),
    ...(loki ? { onLog: (id: string, text: string) => loki.push(id, store.get(id)?.orgId ?? '', text) } : {}),
    // A turn's changes to the run's repository: a branch of the session's, and a pull request.
    ...(repositories
      ? { publish: (row: SessionRow, handle: SandboxHandle, turn: TurnPublish) => repositories.publish(row, handle, turn) }
      : {}),
    beforeTurn: (row, handle, token) => repositories?.beforeTurn(row, handle, token),
    prepareFirstTurn: async (row, handle, prebuilt) => {
      // The repository first: a checkout needs the workspace empty of what the session brings. A
      // prebuilt image holds the checkout, and the attachments of the session it was saved from.
      const adapter = adapters[row.harness as keyof typeof adapters]
      const carried = [`${handle.workspace}/${ATTACHMENTS_DIR}`, ...(adapter ? [`${handle.home}/${adapter.skillsDir}`] : [])]
      if (prebuilt) await removeInSandbox(driver, handle, carried)
      else await repositories?.checkout(row, handle)
      if (adapter) skills.install(row.id, handle.hostHome, adapter.skillsDir)
      return files.place(row.id, handle.hostWorkspace, handle.workspace)
    },
    dataDir: config.dataDir,
    ...(region.clustered ? { region: { node: config.node.name, lostNode: (row: SessionRow) => region.lostNode(row.sandboxNode) } } : {}),
    limits: {
      memoryBytes: config.sandboxMemoryBytes,
      maxProcesses: config.sandboxMaxProcesses,
      diskBytes: config.sandboxDiskBytes,
      cpus: config.sandboxCpus,
    },
    turnTimeoutMs: config.turnTimeoutMs,
    transcriptMaxBytes: config.transcriptMaxBytes,
    now,
    log,
    quiesce: (id, deadline) => gateway.quiesce(id, deadline),
    masks: store.masks,
    ...environmentPorts,
  })
  // The machine loop: every status change goes through it; the runtime reports back to it.
  const actor = new SessionActor({
    db,
    store,
    runtime,
    plans,
    metrics,
    defaultMaxConcurrent: config.defaultMaxConcurrent,
    capacity: config.capacity,
    queue,
    idleMs: config.idleMs,
    now,
    log,
    turnEnded: webhooks,
  })
  runtime.connect(actor)
  const sessions = new SessionService({
    db,
    catalog,
    versions: runnable,
    store,
    queries,
    actor,
    runtime,
    installer,
    plans,
    accounts,
    files,
    agents,
    // Under the webhook rules (public https only, the address checked as the connection is made),
    // all of a create's images and skills within one budget of requests and time.
    fetches: { get, limits: config.fetchLimits },
    ...(repositories ? { repositories } : {}),
    skills,
    connections,
    trackers,
    idempotencyMs: config.idempotencyMs,
    now,
    log,
  })
  // The previous process's sessions come back while the server already listens (the app holds other
  // requests), then warm sandboxes (once the start-up sweep ran) and housekeeping; none on a replica.
  let stopHousekeeping = () => {}
  const rehydrated = () => {
    runtime.warm.start()
    void fillNodeCompileCache(geminiEntryPath(), log)
    if (runtime.warm.size > 0) log(`agentd: ${runtime.warm.size} sandbox(es) kept warm for the next sessions (AGENTD_WARM_SANDBOXES)`)
    const { idleMs, timeScale } = config
    stopHousekeeping = startHousekeeping({ sessions, files, artifacts, installer, store, catalog, idleMs, timeScale, now })
  }
  const ready = replica ? Promise.resolve() : actor.rehydrate().then(rehydrated)
  if (!replica) webhooks.start()
  const app = createApp({
    auth,
    sessions,
    queries,
    search,
    transcripts: new TranscriptService(queries, store),
    logs: new SessionLogReader({ sessions: queries, store, loki, now }),
    toolCalls: new ToolCallService(queries, store),
    charts: new StatechartService(auth, store),
    changes: new ChangesService(queries, repositories),
    installations,
    projects: new ProjectService(db, identity, installations),
    identity,
    consoleOidc: config.oidc && { issuer: config.oidc.issuer, clientId: config.oidc.audience },
    apiKeys,
    plans,
    accounts,
    files,
    agents,
    connections,
    connectors,
    environments,
    secrets,
    metrics,
    metricsToken: config.metricsToken,
    catalog,
    region,
    runnable,
    now,
    sseKeepaliveMs: options.sseKeepaliveMs,
    ready,
    readyWaitMs: options.readyWaitMs,
    requestLog: options.requestLog,
  })

  return {
    app,
    /** Settles when rehydration is done (rejects when it failed: the process should stop). */
    ready,
    /** Settles (with why) when this node's role in its region changed: main.ts restarts it. */
    nodeChanged,
    identity,
    sessions,
    actor,
    queries,
    store,
    search,
    artifacts,
    webhooks,
    apiKeys,
    plans,
    files,
    installations,
    environments,
    secrets,
    connections,
    metrics,
    gateway,
    driver,
    /** The sandboxes kept booted ahead of the next sessions. */
    warm: runtime.warm as Pick<WarmSandboxes, 'size' | 'booted' | 'startedClis'>,
    /**
     * Stops everything and closes the database. Turns that can be (gVisor) are handed over to the
     * next start, each let finish its model request first for at most AGENTD_SHUTDOWN_S.
     */
    async close() {
      const deadline = Date.now() + config.shutdownMs
      await ready.catch(() => {})
      stopHousekeeping()
      await actor.shutdown(deadline)
      await loki?.close()
      await webhooks.stop(Math.max(deadline, Date.now() + WEBHOOK_FLUSH_MS))
      await gateway.stop()
      stopNode()
      store.events.close()
      database.close()
    },
  }
}
