import { ConsoleBundle } from './console/bundle'
import { consoleRoutes, type ConsoleOidc } from './console/routes'
import { identityRoutes } from './identity/routes'
import type { IdentityService } from './identity/service'
import { projectRoutes } from './projects/routes'
import type { ProjectService } from './projects/service'
import { repositoryRoutes } from './repositories/routes'
import type { ChangesService } from './repositories/changes'
import type { InstallationService } from './repositories/installations'
import { Elysia, t } from 'elysia'
import { openapi } from '@elysiajs/openapi'
import { accountRoutes } from './accounts/routes'
import { fileRoutes } from './files/routes'
import { agentProfileRoutes } from './agents/routes'
import { connectionRoutes } from './connections/routes'
import { environmentRoutes } from './environments/routes'
import type { EnvironmentService } from './environments/environment'
import type { SecretService } from './environments/secrets'
import { agentRoutes } from './catalog/routes'
import { apiKeyRoutes } from './api-keys/routes'
import { SERVER_BODY_LIMIT } from './http/body'
import { finishOpenApi } from './http/openapi-document'
import { DOCS_SCRIPT, DOCS_STYLE, docsAssets } from './http/docs'
import { ApiError } from './domain/errors'
import { errorPlugin, errorModel } from './http/errors'
import { requestIdOf } from './http/request-id'
import { metricsRoutes } from './metrics/routes'
import { planRoutes } from './plans/routes'
import { searchRoutes } from './search/routes'
import { artifactRoutes } from './sessions/artifact-routes'
import { liveRoutes } from './sessions/live-routes'
import { sessionRoutes } from './sessions/routes'
import { statechartRoutes } from './statechart/routes'
import { transcriptRoutes } from './transcript/routes'
import type { AccountService } from './accounts/service'
import type { ApiKeyService } from './api-keys/service'
import type { FileService } from './files/service'
import type { AgentService } from './agents/service'
import type { ConnectionService } from './connections/service'
import type { ConnectorService } from './connections/connectors'
import type { AuthService } from './identity/auth'
import type { Catalog } from './catalog/catalog'
import type { HarnessVersions } from './catalog/catalog'
import type { SessionQueries } from './sessions/queries'
import type { SessionService } from './sessions/service'
import type { Metrics } from './metrics/metrics'
import type { PlanService } from './plans/service'
import type { SessionSearch } from './search/service'
import type { StatechartService } from './statechart/service'
import type { ToolCallService } from './transcript/tool-calls'
import type { SessionLogReader } from './transcript/logs'
import type { TranscriptService } from './transcript/service'
import type { RegionService } from './region/service'
import { forwardedByNode, forwardsToPrimary, forwardToPrimary, TXID_HEADER } from './region/forward'
import { regionRoutes } from './region/routes'

export interface AppDeps {
  auth: AuthService
  sessions: SessionService
  queries: SessionQueries
  search: SessionSearch
  transcripts: TranscriptService
  logs: SessionLogReader
  toolCalls: ToolCallService
  charts: StatechartService
  changes: ChangesService
  installations: InstallationService
  projects: ProjectService
  identity: IdentityService
  /** The provider the console signs people in with (AGENTD_OIDC_ISSUER, its audience as the client id). */
  consoleOidc?: ConsoleOidc | null
  apiKeys: ApiKeyService
  plans: PlanService
  accounts: AccountService
  files: FileService
  agents: AgentService
  connections: ConnectionService
  connectors: ConnectorService
  /** Project environments and secrets (contract section 10). */
  environments: EnvironmentService
  secrets: SecretService
  metrics: Metrics
  /** AGENTD_METRICS_TOKEN (null: /metrics is off). */
  metricsToken: string | null
  catalog: Catalog
  /** This node's place in its region: a replica forwards writes to the primary (contract section 12). */
  region: RegionService
  runnable: HarnessVersions
  now: () => number
  /** Keepalive comment interval on idle event streams (15 s; tests shorten it). */
  sseKeepaliveMs?: number
  /**
   * Settles once the sessions of the previous process are back (orphans swept, turns adopted).
   * Until then only /healthz answers; every other request waits for it, so none sees a session
   * the restart has not dealt with yet.
   */
  ready: Promise<void>
  /** How long a request waits for `ready` before a 503 (READY_WAIT_MS). */
  readyWaitMs?: number
  /** One structured line per answered request (main.ts writes them as JSON logs). */
  requestLog?: (entry: RequestLogEntry) => void
}

export interface RequestLogEntry {
  requestId: string
  method: string
  path: string
  status: number
  ms: number
  /** The org slug and session id the path names, when it names them. */
  org?: string
  session?: string
}

/** `/o/{org}/…` and `/o/{org}/p/{project}/sessions/{session}…`: what a request is about, for its log line. */
const SCOPED_PATH = /^\/o\/([^/]+)(?:\/p\/[^/]+\/sessions\/([^/]+))?/

/** A path segment decoded, or as sent when its percent-encoding is malformed (it is logged either way). */
function decoded(segment: string): string {
  try {
    return decodeURIComponent(segment)
  } catch {
    return segment
  }
}

/** How long a request waits for a restart's rehydration before a 503 (Bun closes idle connections at 10 s). */
const READY_WAIT_MS = 5000

/** The HTTP surface. Tests call `createApp(deps).handle(request)`; main.ts adds `listen`. */
export function createApp(deps: AppDeps) {
  // normalize: false makes `additionalProperties: false` reject unknown fields (400) instead of
  // silently dropping them, as the spec asks of PATCH bodies.
  let ready = false
  deps.ready.then(
    () => (ready = true),
    () => {}, // the process that started the app reports it; requests see it through the await below
  )
  const startedAt = new WeakMap<Request, number>()
  // A short wait answers most requests normally; a rehydration still going after it (many
  // sandboxes, a stuck runsc) gets a clear 503 to retry, never a request held forever.
  const untilReady = async () => {
    await Promise.race([deps.ready.catch(() => {}), Bun.sleep(deps.readyWaitMs ?? READY_WAIT_MS)])
    if (!ready)
      throw new ApiError('unavailable', 'agentd is starting: the previous run’s sessions are being brought back; retry shortly', 'STARTING')
  }
  // Every hook here runs on every request: this one is not async (an async hook makes each request
  // wait on a promise), and the request log's are added only when there is a log (bench/http.ts:
  // the hooks, with a request id header on every answer, had taken 40 % of GET throughput).
  const app = new Elysia({ normalize: false, encodeSchema: false, serve: { maxRequestBodySize: SERVER_BODY_LIMIT } }).onRequest(
    ({ request }) => {
      if (deps.requestLog) startedAt.set(request, performance.now())
      if (!ready && new URL(request.url).pathname !== '/healthz') return untilReady()
      if (forwardsToPrimary(deps.region, request)) return forwardToPrimary(deps.region, request)
    },
  )
  // The primary tells a replica that forwarded a write which transaction to wait for (only in a region).
  const regional = deps.region.clustered
    ? app.onAfterHandle({ as: 'global' }, ({ request, set }) => {
        if (!forwardedByNode(deps.region, request)) return
        return deps.region.txid().then((txid) => {
          set.headers[TXID_HEADER] = String(txid)
        })
      })
    : app
  const logged = deps.requestLog
    ? regional.onAfterResponse({ as: 'global' }, ({ request, set }) => {
        const started = startedAt.get(request) ?? performance.now()
        const path = new URL(request.url).pathname
        const [, org, session] = SCOPED_PATH.exec(path) ?? []
        deps.requestLog!({
          requestId: requestIdOf(request),
          method: request.method,
          path,
          status: typeof set.status === 'number' ? set.status : 200,
          ms: Math.round((performance.now() - started) * 10) / 10,
          ...(org ? { org: decoded(org) } : {}),
          ...(session ? { session: decoded(session) } : {}),
        })
      })
    : regional
  return (
    logged
      .use(errorPlugin)
      .use(errorModel)
      .use(
        // Only the document's own route gets this hook (see openapi-document.ts), not every request.
        new Elysia({ name: 'agentd/openapi' })
          .onAfterHandle(({ response }) => finishOpenApi(response))
          .use(
            openapi({
              path: '/docs',
              specPath: '/openapi.json',
              // Swagger UI from agentd itself (docs.ts), not a CDN: the page works offline.
              provider: 'swagger-ui',
              swagger: { cdn: DOCS_SCRIPT, theme: DOCS_STYLE, validatorUrl: 'none' },
              openapiVersion: '3.1.0',
              documentation: {
                info: { title: 'agentd: Agent Session Service API', version: '1.0.0' },
                components: {
                  securitySchemes: {
                    bearer: { type: 'http', scheme: 'bearer' },
                    metricsToken: { type: 'http', scheme: 'bearer', description: 'AGENTD_METRICS_TOKEN, for GET /metrics only' },
                  },
                },
                security: [{ bearer: [] }],
              },
            }),
          ),
      )
      .use(docsAssets())
      .get(
        '/healthz',
        async () => ({ ok: true as const, ready, role: deps.region.role(), node: deps.region.nodeName, txid: await deps.region.txid() }),
        {
          response: {
            200: t.Object({
              ok: t.Literal(true),
              role: t.Union([t.Literal('primary'), t.Literal('replica')], {
                description: "This node's role in its region (LiteFS decides it); a node alone is the primary",
              }),
              node: t.String({ description: 'AGENTD_NODE: this node’s name' }),
              txid: t.Integer({ description: 'The last LiteFS transaction this node has applied (0 without LiteFS)' }),
              ready: t.Boolean({
                description: 'false while the sessions of the previous run are being brought back; other requests wait until then',
              }),
            }),
          },
          detail: {
            operationId: 'health',
            tags: ['health'],
            summary: 'Liveness, without auth, answered at once after a start',
            security: [],
          },
        },
      )
      // Before any route group's auth: the console's page and files are served to anyone.
      .use(consoleRoutes(new ConsoleBundle(), deps.consoleOidc ?? null))
      .use(sessionRoutes(deps.auth, deps.sessions, deps.queries))
      .use(liveRoutes(deps.auth, deps.sessions, deps.queries, deps.sseKeepaliveMs))
      .use(artifactRoutes(deps.auth, deps.queries))
      .use(searchRoutes(deps.auth, deps.search))
      .use(transcriptRoutes(deps.auth, deps.transcripts, deps.toolCalls, deps.logs))
      .use(statechartRoutes(deps.auth, deps.charts))
      .use(repositoryRoutes(deps.auth, deps.changes, deps.installations))
      .use(projectRoutes(deps.auth, deps.projects))
      .use(identityRoutes(deps.auth, deps.identity))
      .use(agentRoutes(deps.auth, deps.catalog, deps.runnable, deps.now))
      .use(apiKeyRoutes(deps.auth, deps.apiKeys))
      .use(planRoutes(deps.auth, deps.plans))
      .use(accountRoutes(deps.auth, deps.accounts))
      .use(fileRoutes(deps.auth, deps.files))
      .use(agentProfileRoutes(deps.auth, deps.agents))
      .use(connectionRoutes(deps.auth, deps.connections, deps.connectors))
      .use(environmentRoutes(deps.auth, deps.environments, deps.secrets))
      .use(metricsRoutes(deps.metrics, deps.metricsToken))
      .use(regionRoutes(deps.region))
  )
}

export type App = ReturnType<typeof createApp>
