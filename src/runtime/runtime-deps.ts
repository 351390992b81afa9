import type { SandboxDriver, SandboxHandle, SandboxLimits } from '../../sandbox/driver'
import type { Harness } from '../domain/harness'
import type { LogFields } from '../domain/log'
import type { HarnessAdapter } from '../harness/harness'
import type { SecretMasks } from '../session-record/masks'
import type { SessionRow } from '../session-record/store'
import type { ArtifactStore } from './artifacts'
import type { EgressHook, PrebuildPort, SandboxEnvironment } from './environment'
import type { GatewaySessions, TurnTerms } from './gateway-bindings'
import type { StartSlots } from './start-slots'
import type { TurnEndDeps } from './turn-end'
import type { TurnSpecDeps } from './turn-spec'

/** What the session runtime is built from: the ports it reaches the rest of agentd through. */
/** Besides what a turn's spec is made from (the store, the catalog, the installer, tool servers): */
export interface RuntimeDeps extends TurnSpecDeps, Pick<TurnEndDeps, 'publish'> {
  adapters: Partial<Record<Harness, HarnessAdapter>>
  driver: SandboxDriver
  gateway: { host: string; port: number }
  gatewaySessions: GatewaySessions
  /** Creates and wakes within AGENTD_MAX_STARTING. */
  starts: StartSlots
  /** Sandboxes to keep booted ahead of the sessions that take them (AGENTD_WARM_SANDBOXES; none when absent). */
  warmSandboxes?: number
  /**
   * The CLIs that may be started ahead in a warm sandbox (AGENTD_WARM_CLI): each harness's model, and
   * how long the gateway holds an ask for a first message (ASK_AGAIN_MS, scaled in tests). Absent: none is.
   */
  startedCli?: { models: Partial<Record<Harness, string>>; askAgainMs: number } | null
  /** What the gateway holds a turn of this session to: the plan's limits mid-turn, or the caller's own provider account. */
  turnTerms: (row: SessionRow) => Promise<TurnTerms>
  artifacts: ArtifactStore
  /**
   * Before the first turn: checks out its repository (unless the sandbox started from a prebuilt
   * image, which holds the checkout), installs its skills, writes its attachments; the prompt's
   * lines naming them, or null.
   */
  prepareFirstTurn: (row: SessionRow, handle: SandboxHandle, prebuilt: boolean) => Promise<string | null>
  /** Before every turn's CLI, with the turn's gateway key (its repository's git config). */
  beforeTurn: (row: SessionRow, handle: SandboxHandle, token: string) => void
  dataDir: string
  /**
   * The region (contract section 12): `node` is this node's name, recorded as where each sandbox it
   * starts lives; `lostNode` names the node a session's sandbox lived on when that node is gone to
   * this one (another node of the region), else null. A node alone has none lost.
   */
  region?: { node: string; lostNode: (row: SessionRow) => string | null }
  limits: SandboxLimits
  /** A turn running longer than this is killed and fails. */
  turnTimeoutMs: number
  /** Raw stdout one turn may store (AGENTD_TRANSCRIPT_MAX_MB); the turn runner's default otherwise. */
  transcriptMaxBytes?: number
  now: () => number
  log: (line: string, fields?: LogFields) => void
  /** Each line stored in a session's log, also (AGENTD_LOKI_URL) for Loki. */
  onLog?: (id: string, text: string) => void
  /** Readies a session's turn for a freeze at shutdown: its model requests end, new ones wait (Gateway.quiesce). */
  quiesce: (sessionId: string, deadline: number) => Promise<number | null>
  /**
   * The Project environment the session's sandbox runs in (its secrets, setup and network), read
   * afresh before each turn so a changed secret applies from the next turn on; null for none.
   */
  environment?: (row: SessionRow) => Promise<SandboxEnvironment | null>
  /** Every secret value handed to a sandbox is masked in what the session stores from then on. */
  masks?: SecretMasks
  /** Prebuilt images: a sandbox whose Project has one for its key starts from it and skips setup. */
  prebuilds?: PrebuildPort
  /** The egress proxy for the session's sandbox, when its Project allows network; null for none. */
  egress?: (sessionId: string, projectId: string | null) => EgressHook | null
}
