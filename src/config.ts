import { readFileSync } from 'node:fs'
import { hostResources, type HostResources } from './host-resources'
import { join, resolve } from 'node:path'
import { hostname } from 'node:os'
import type { Harness } from './domain/harness'

export type SandboxKind = 'gvisor' | 'bwrap' | 'process'

/** Environment read once at start (contract section 1); everything else gets a typed Config. */
export interface Config {
  port: number
  host: string
  dataDir: string
  /** The database file: in AGENTD_DB_DIR (default DATA_DIR), which is the LiteFS mount in a region. */
  dbPath: string
  /** This node in a region (contract section 12; src/region): used only when the database folder is a LiteFS mount. */
  node: NodeConfig
  sandbox: SandboxKind | null
  configFile: string | null
  publicUrl: string
  /** Identity-provider JWTs are accepted only with both an issuer and the audience they are for. */
  oidc: { issuer: string; audience: string } | null
  webhookAllowPrivate: boolean
  /** AGENTD_EGRESS_ALLOW_PRIVATE=1 (tests only): a Project's allowed hosts may resolve to any address. */
  egressAllowPrivate: boolean
  /** AGENTD_PREBUILDS_PER_PROJECT: prebuilt images kept per Project, newest first. */
  prebuildsPerProject: number
  timeScale: number
  /** Concurrent runs per org when its plan sets none. */
  defaultMaxConcurrent: number
  sandboxMemoryBytes: number
  sandboxMaxProcesses: number
  /** What one sandbox may write (workspace, home, temp): AGENTD_SANDBOX_DISK_MB, default 10240. */
  sandboxDiskBytes: number
  /** CPU cores one sandbox may use: AGENTD_SANDBOX_CPUS, default 2. */
  sandboxCpus: number
  turnTimeoutMs: number
  /** How long a graceful stop (SIGTERM) waits for turns' model requests before freezing them for the next start. */
  shutdownMs: number
  /** Raw stdout a turn may store in its transcript; past it the capture is `partial` (256 MB). */
  transcriptMaxBytes: number
  /** AGENTD_ARTIFACTS_MAX_MB: new artifact bytes one turn may store. */
  artifactsMaxBytes: number
  /** A resumable session parked longer than this expires (7 days, scaled by AGENTD_TIME_SCALE). */
  idleMs: number
  /** How long an Idempotency-Key names its session (24 hours, scaled by AGENTD_TIME_SCALE). */
  idempotencyMs: number
  /** How long an upload no session uses is kept (7 days, scaled by AGENTD_TIME_SCALE). */
  unusedFileMs: number
  /** AGENTD_FILE_QUOTA_MB (default 1024): bytes of files one caller may store within the unused-upload window. */
  fileQuotaBytes: number
  /** The code host's REST API that skill URLs are read through (AGENTD_GITHUB_API_URL). */
  githubApiUrl: string
  /** AGENTD_LINEAR_API_URL: Linear's GraphQL endpoint, for tracker issues a run names (a stand-in in tests). */
  linearApiUrl: string
  /** AGENTD_GITHUB_TOKEN: a token for that API (rate limits, private skill repositories); null: anonymous. */
  githubToken: string | null
  /**
   * AGENTD_GITHUB_APP_ID and AGENTD_GITHUB_APP_KEY_FILE (its private key, PEM): the GitHub App runs
   * reach repositories through; null: none.
   */
  githubApp: { appId: string; privateKey: string } | null
  /** Where the code host serves git (`<base>/<owner>/<name>.git`): https://github.com, or an Enterprise host. */
  githubGitUrl: string
  /** AGENTD_FETCH_CA_FILE's PEM: a CA trusted for caller URLs besides the system's (tests only). */
  fetchCa: string | null
  /** What one create's caller-named fetches (skills, images) take together at most: 200 requests, 30 s (scaled by AGENTD_TIME_SCALE). */
  fetchLimits: { requests: number; ms: number }
  /** What this host runs at once, whatever the orgs' plans allow (see hostCapacity). */
  capacity: HostCapacity
  /**
   * AGENTD_WARM_SANDBOXES: sandboxes kept booted ahead of the sessions that take them (0: none);
   * null: the default, one per eight sandboxes the host runs (at least one) on gVisor, none on the
   * other drivers, whose starts cost milliseconds.
   */
  warmSandboxes: number | null
  /**
   * AGENTD_WARM_CLI: the harnesses whose CLI may be started ahead in a warm sandbox, waiting for the
   * first message of the session that takes it (comma-separated; the default `harness_1,harness_3`:
   * Claude Code and Gemini CLI, the ones that can be, also when unset or blank); `none`: none is.
   */
  warmCli: Harness[]
  /** AGENTD_METRICS_TOKEN: the bearer token /metrics wants; null: /metrics is off. */
  metricsToken: string | null
  /** AGENTD_LITESTREAM_URL: where Litestream replicates the database to (file:// or s3://); null: no replication. */
  litestreamUrl: string | null
  /** AGENTD_LOKI_URL: Loki's base URL; session logs are pushed there and read back (source loki). */
  lokiUrl: string | null
}

/**
 * Sandboxes this host runs at once (`maxSandboxes`: allocating or running a turn) and starts at
 * once (`maxStarting`: a gVisor boot is CPU-heavy). Past either, sessions wait `queued`.
 */
export interface HostCapacity {
  maxSandboxes: number
  maxStarting: number
  /** How the figures were chosen, for the start-up log. */
  basis: string
}

export class ConfigError extends Error {}

/**
 * The operator's config file (`AGENTD_CONFIG`, a JSON object): each part of agentd reads its own
 * key of it (`catalog`, `providers`, `plans`, `accounts`). No file: an empty object.
 */
export function readConfigFile(configFile: string | null): Record<string, unknown> {
  if (!configFile) return {}
  let parsed: unknown
  try {
    parsed = JSON.parse(readFileSync(configFile, 'utf8'))
  } catch (err) {
    throw new ConfigError(`AGENTD_CONFIG ${configFile}: ${(err as Error).message}`)
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new ConfigError(`AGENTD_CONFIG ${configFile}: not a JSON object`)
  return parsed as Record<string, unknown>
}

/** AGENTD_LINEAR_API_URL: https, or http to this machine (as Linear's SDK allows). */
function linearApiUrl(raw: string | undefined): string {
  const value = raw || 'https://api.linear.app/graphql'
  const url = URL.parse(value)
  const local = url !== null && ['localhost', '127.0.0.1', '[::1]'].includes(url.hostname)
  if (url?.protocol !== 'https:' && !(url?.protocol === 'http:' && local))
    throw new ConfigError(`AGENTD_LINEAR_API_URL must be an https URL (http only to this machine), got "${value}"`)
  return value
}

/** The harnesses a CLI can be started ahead for (harness/*.ts `startAhead`): Codex reads its prompt before it starts. */
export const STARTABLE_CLIS: readonly Harness[] = ['harness_1', 'harness_3']

/** AGENTD_WARM_CLI: harnesses, comma-separated (default STARTABLE_CLIS), or `none`. */
function warmCli(raw: string | undefined): Harness[] {
  if (raw === undefined || raw.trim() === '') return [...STARTABLE_CLIS]
  if (raw.trim() === 'none') return []
  const named = raw.split(',').map((part) => part.trim())
  for (const harness of named)
    if (!STARTABLE_CLIS.includes(harness as Harness))
      throw new ConfigError(
        `AGENTD_WARM_CLI names "${harness}": only ${STARTABLE_CLIS.join(' and ')} can be started ahead (or none)` +
          (harness === 'harness_2' ? '; Codex reads its prompt before it starts, so starting it ahead saves nothing' : ''),
      )
  return [...new Set(named)] as Harness[]
}

/** How many sandboxes to keep warm: AGENTD_WARM_SANDBOXES, else one per eight the host runs on gVisor (none elsewhere). */
export function warmSandboxCount(config: Pick<Config, 'warmSandboxes' | 'capacity'>, driverKind: string): number {
  if (config.warmSandboxes !== null) return config.warmSandboxes
  if (driverKind !== 'gvisor') return 0
  return Math.min(config.capacity.maxStarting, Math.max(1, Math.floor(config.capacity.maxSandboxes / 8)))
}

/** A whole number of at least `min` (1 unless said), or null when unset. */
function wholeNumber(name: string, raw: string | undefined, min = 1): number | null {
  if (raw === undefined || raw === '') return null
  const value = Number(raw)
  if (!Number.isInteger(value) || value < min) throw new ConfigError(`${name} must be a whole number of at least ${min}, got "${raw}"`)
  return value
}

/**
 * AGENTD_MAX_SANDBOXES and AGENTD_MAX_STARTING, or defaults from the machine: as many sandboxes
 * as their memory limits fit in the host's memory, at most four per core (agents mostly wait on
 * their model), and one start per core at a time. The machine's figures are lowered by the limits
 * of the cgroups agentd runs in (a container's, see host-resources.ts).
 */
export function hostCapacity(
  env: Record<string, string | undefined>,
  sandboxMemoryBytes: number,
  host: Pick<HostResources, 'cores' | 'memoryBytes'> & Partial<HostResources> = hostResources(),
): HostCapacity {
  const byMemory = Math.max(1, Math.floor(host.memoryBytes / sandboxMemoryBytes))
  const derived = Math.min(byMemory, 4 * host.cores)
  const maxSandboxes = wholeNumber('AGENTD_MAX_SANDBOXES', env.AGENTD_MAX_SANDBOXES) ?? derived
  const maxStarting = Math.min(maxSandboxes, wholeNumber('AGENTD_MAX_STARTING', env.AGENTD_MAX_STARTING) ?? host.cores)
  const gib = (bytes: number) => `${(bytes / 1024 ** 3).toFixed(1)} GiB`
  const basis =
    env.AGENTD_MAX_SANDBOXES || env.AGENTD_MAX_STARTING
      ? 'from AGENTD_MAX_SANDBOXES / AGENTD_MAX_STARTING'
      : `from ${host.cores} cores and ${gib(host.memoryBytes)} of memory at ${gib(sandboxMemoryBytes)} per sandbox` +
        (host.limitedBy?.length ? ` (lowered by ${host.limitedBy.join(' and ')})` : '')
  return { maxSandboxes, maxStarting, basis }
}

function positiveNumber(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === '') return fallback
  const value = Number(raw)
  if (!Number.isFinite(value) || value <= 0) throw new ConfigError(`${name} must be a positive number, got "${raw}"`)
  return value
}

function port(raw: string | undefined): number {
  if (raw === undefined || raw === '') return 8787
  const value = Number(raw)
  // 0 asks the system for any free port; the log line says which one was taken.
  if (!Number.isInteger(value) || value < 0 || value > 65535) throw new ConfigError(`PORT must be a port number, got "${raw}"`)
  return value
}

/**
 * An issuer without an audience would accept any token the provider mints for any application, so
 * that is a start error rather than a silent default.
 */
function oidc(issuer: string | undefined, audience: string | undefined): Config['oidc'] {
  if (!issuer) {
    if (audience) throw new ConfigError('AGENTD_OIDC_AUDIENCE is set but AGENTD_OIDC_ISSUER is not')
    return null
  }
  if (!audience) throw new ConfigError('AGENTD_OIDC_ISSUER needs AGENTD_OIDC_AUDIENCE: the client id that tokens for agentd carry in `aud`')
  return { issuer, audience }
}

function githubApp(appId: string | undefined, keyFile: string | undefined): Config['githubApp'] {
  if (!appId && !keyFile) return null
  if (!appId || !keyFile) throw new ConfigError('AGENTD_GITHUB_APP_ID and AGENTD_GITHUB_APP_KEY_FILE go together: set both, or neither')
  try {
    return { appId, privateKey: readFileSync(keyFile, 'utf8') }
  } catch (err) {
    throw new ConfigError(`AGENTD_GITHUB_APP_KEY_FILE: ${(err as Error).message}`)
  }
}

/** This agentd as one node of a region. */
export interface NodeConfig {
  /** AGENTD_NODE: its name in the region (default the host's name; a region's nodes must set it). */
  name: string
  /** AGENTD_NODE was set: a name that outlives the host's (a re-created container keeps its sessions). */
  named: boolean
  /** AGENTD_NODE_URL: where the other nodes reach its agentd; null when it is alone. */
  url: string | null
  /** AGENTD_CLUSTER_TOKEN: what node-to-node requests carry; null when it is alone. */
  clusterToken: string | null
  /** AGENTD_NODE_TIMEOUT_S (default 30): a node not heard from for this long is lost. */
  timeoutMs: number
}

function nodeConfig(env: Record<string, string | undefined>): NodeConfig {
  const token = env.AGENTD_CLUSTER_TOKEN || null
  // A guessable token would let any caller speak as a node.
  if (token !== null && token.length < 32)
    throw new ConfigError('AGENTD_CLUSTER_TOKEN must be at least 32 characters (openssl rand -hex 32)')
  const url = (env.AGENTD_NODE_URL || '').replace(/\/+$/, '') || null
  if (url !== null && !/^https?:\/\/[^/]+$/.test(url)) throw new ConfigError(`AGENTD_NODE_URL must be http(s)://host:port, got "${url}"`)
  return {
    name: env.AGENTD_NODE || hostname(),
    named: Boolean(env.AGENTD_NODE),
    url,
    clusterToken: token,
    timeoutMs: positiveNumber('AGENTD_NODE_TIMEOUT_S', env.AGENTD_NODE_TIMEOUT_S, 30) * 1000,
  }
}

export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  const host = env.HOST || '127.0.0.1'
  const dataDir = resolve(env.DATA_DIR || './data')
  const sandbox = env.AGENTD_SANDBOX || null
  if (sandbox !== null && !['gvisor', 'bwrap', 'process'].includes(sandbox)) {
    throw new ConfigError(`AGENTD_SANDBOX must be gvisor, bwrap or process, got "${sandbox}"`)
  }
  const listenPort = port(env.PORT)
  const timeScale = positiveNumber('AGENTD_TIME_SCALE', env.AGENTD_TIME_SCALE, 1)
  const sandboxMemoryBytes = positiveNumber('AGENTD_SANDBOX_MEMORY_MB', env.AGENTD_SANDBOX_MEMORY_MB, 2048) * 1024 * 1024
  return {
    port: listenPort,
    host,
    dataDir,
    dbPath: join(resolve(env.AGENTD_DB_DIR || dataDir), 'agentd.db'),
    node: nodeConfig(env),
    sandbox: sandbox as SandboxKind | null,
    configFile: env.AGENTD_CONFIG || null,
    publicUrl: (env.AGENTD_PUBLIC_URL || `http://${host}:${listenPort}`).replace(/\/+$/, ''),
    oidc: oidc(env.AGENTD_OIDC_ISSUER, env.AGENTD_OIDC_AUDIENCE),
    webhookAllowPrivate: env.AGENTD_WEBHOOK_ALLOW_PRIVATE === '1',
    egressAllowPrivate: env.AGENTD_EGRESS_ALLOW_PRIVATE === '1',
    prebuildsPerProject: Math.floor(positiveNumber('AGENTD_PREBUILDS_PER_PROJECT', env.AGENTD_PREBUILDS_PER_PROJECT, 3)),
    timeScale,
    defaultMaxConcurrent: 4,
    sandboxMemoryBytes,
    sandboxMaxProcesses: positiveNumber('AGENTD_SANDBOX_PROCESSES', env.AGENTD_SANDBOX_PROCESSES, 512),
    sandboxDiskBytes: positiveNumber('AGENTD_SANDBOX_DISK_MB', env.AGENTD_SANDBOX_DISK_MB, 10240) * 1024 * 1024,
    sandboxCpus: positiveNumber('AGENTD_SANDBOX_CPUS', env.AGENTD_SANDBOX_CPUS, 2),
    turnTimeoutMs: positiveNumber('AGENTD_TURN_TIMEOUT_S', env.AGENTD_TURN_TIMEOUT_S, 3600) * 1000,
    shutdownMs: positiveNumber('AGENTD_SHUTDOWN_S', env.AGENTD_SHUTDOWN_S, 20) * 1000,
    transcriptMaxBytes: positiveNumber('AGENTD_TRANSCRIPT_MAX_MB', env.AGENTD_TRANSCRIPT_MAX_MB, 256) * 1024 * 1024,
    artifactsMaxBytes: positiveNumber('AGENTD_ARTIFACTS_MAX_MB', env.AGENTD_ARTIFACTS_MAX_MB, 1024) * 1024 * 1024,
    idleMs: 7 * 24 * 3600 * 1000 * timeScale,
    idempotencyMs: 24 * 3600 * 1000 * timeScale,
    unusedFileMs: 7 * 24 * 3600 * 1000 * timeScale,
    fileQuotaBytes: positiveNumber('AGENTD_FILE_QUOTA_MB', env.AGENTD_FILE_QUOTA_MB, 1024) * 1024 * 1024,
    githubApiUrl: env.AGENTD_GITHUB_API_URL || 'https://api.github.com',
    linearApiUrl: linearApiUrl(env.AGENTD_LINEAR_API_URL),
    githubToken: env.AGENTD_GITHUB_TOKEN || null,
    githubApp: githubApp(env.AGENTD_GITHUB_APP_ID, env.AGENTD_GITHUB_APP_KEY_FILE),
    githubGitUrl: (env.AGENTD_GITHUB_GIT_URL || 'https://github.com').replace(/\/+$/, ''),
    fetchCa: env.AGENTD_FETCH_CA_FILE ? readFileSync(env.AGENTD_FETCH_CA_FILE, 'utf8') : null,
    fetchLimits: { requests: 200, ms: 30_000 * timeScale },
    capacity: hostCapacity(env, sandboxMemoryBytes),
    warmSandboxes: wholeNumber('AGENTD_WARM_SANDBOXES', env.AGENTD_WARM_SANDBOXES, 0),
    warmCli: warmCli(env.AGENTD_WARM_CLI),
    metricsToken: env.AGENTD_METRICS_TOKEN || null,
    litestreamUrl: env.AGENTD_LITESTREAM_URL || null,
    lokiUrl: (env.AGENTD_LOKI_URL || '').replace(/\/+$/, '') || null,
  }
}
