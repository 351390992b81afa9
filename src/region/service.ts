import { timingSafeEqual } from 'node:crypto'
import { desc, sql } from 'drizzle-orm'
import type { NodeConfig } from '../config'
import type { Db } from '../db/client'
import { nodes } from '../db/schema'
import type { LiteFsMount } from './litefs'

export type Role = 'primary' | 'replica'

/** What a node tells the primary at each heartbeat. */
export interface NodeBeat {
  name: string
  url: string
  maxSandboxes: number
}

export interface RegionDeps {
  db: Db
  /** The LiteFS mount of the database; null when this node is alone (it is then the primary). */
  mount: LiteFsMount | null
  node: NodeConfig
  maxSandboxes: number
  now: () => number
}

/**
 * This node's place in its region (contract section 12): its role (LiteFS decides it), the
 * position of its database, and the region's nodes as the primary records them. A node alone
 * (no LiteFS) is the primary and has no other node.
 */
/** After the primary could not be asked, a replica does not ask again for this long. */
const ASK_AGAIN_AFTER_FAILURE_MS = 1000

export class RegionService {
  private readonly token: Buffer | null
  /** When this process first found itself primary: the primary's row is the latest such. */
  private primarySince: number | null = null
  /** The catch-up ask out to the primary (catchUp), and the one queued behind it. */
  private asking: Promise<void> | null = null
  private nextAsk: Promise<void> | null = null
  private askFailedAt = Number.NEGATIVE_INFINITY

  constructor(private readonly deps: RegionDeps) {
    this.token = deps.node.clusterToken ? Buffer.from(deps.node.clusterToken) : null
  }

  get clustered(): boolean {
    return this.deps.mount !== null
  }

  /** AGENTD_CLUSTER_TOKEN, which this node's requests to other nodes carry. */
  get clusterToken(): string | null {
    return this.deps.node.clusterToken
  }

  /** AGENTD_NODE_URL: where this node answers (null when it is alone). */
  get ownUrl(): string | null {
    return this.deps.node.url
  }

  get nodeName(): string {
    return this.deps.node.name
  }

  role(): Role {
    return !this.deps.mount || this.deps.mount.isPrimary() ? 'primary' : 'replica'
  }

  txid(): Promise<number> {
    return this.deps.mount?.txid() ?? Promise.resolve(0)
  }

  /**
   * A replica: waits (2 s for the primary's answer, then at most `ms`) until it has every
   * transaction the primary had when asked at its /healthz. An ask answers only callers that came
   * before it was sent: one that comes while an ask is out waits for the next (at most one is
   * queued). After an ask that failed (the primary down), none is made for a second. Nothing on
   * the primary, or alone.
   */
  catchUp(ms: number): Promise<void> {
    const primary = this.primaryUrl()
    if (this.role() !== 'replica' || !primary || primary === this.ownUrl || Date.now() - this.askFailedAt < ASK_AGAIN_AFTER_FAILURE_MS)
      return Promise.resolve()
    if (!this.asking) {
      this.asking = this.askPrimary(primary, ms).finally(() => {
        this.asking = null
      })
      return this.asking
    }
    this.nextAsk ??= this.asking.then(() => {
      this.nextAsk = null
      return this.catchUp(ms)
    })
    return this.nextAsk
  }

  private async askPrimary(primary: string, ms: number): Promise<void> {
    try {
      const answer = await fetch(`${primary}/healthz`, { signal: AbortSignal.timeout(2000) })
      const txid = Number(((await answer.json()) as { txid?: unknown }).txid)
      if (txid > 0) await this.caughtUp(txid, ms)
    } catch {
      this.askFailedAt = Date.now()
    }
  }

  /** Waits until this node's database has transaction `txid` (at once without LiteFS); false after `ms`. */
  caughtUp(txid: number, ms: number): Promise<boolean> {
    return this.deps.mount?.caughtUp(txid, ms) ?? Promise.resolve(true)
  }

  /** The primary's agentd URL as it recorded it, or null before any primary has. */
  primaryUrl(): string | null {
    const row = this.deps.db
      .select({ url: nodes.url })
      .from(nodes)
      .where(sql`${nodes.primarySince} IS NOT NULL`)
      .orderBy(desc(nodes.primarySince))
      .limit(1)
      .get()
    return row?.url ?? null
  }

  /** The nodes of the region, as recorded: a node not heard from for AGENTD_NODE_TIMEOUT_S is lost. */
  nodeStates(): { name: string; url: string; maxSandboxes: number; heardSecondsAgo: number; lost: boolean }[] {
    const now = this.deps.now()
    return this.deps.db
      .select()
      .from(nodes)
      .all()
      .map((row) => ({
        name: row.name,
        url: row.url,
        maxSandboxes: row.maxSandboxes,
        heardSecondsAgo: Math.max(0, (now - row.heardAt) / 1000),
        lost: now - row.heardAt > this.deps.node.timeoutMs,
      }))
  }

  /**
   * The node a sandbox recorded on `node` lives on, when this node cannot drive it: another node of
   * the region (sandboxes run on the primary that started them; a new primary finds its
   * predecessor's lost with it). Null for this node's own, and for a node alone.
   */
  lostNode(node: string | null): string | null {
    return this.clustered && node !== null && node !== this.deps.node.name ? node : null
  }

  /** A node-to-node request's token: AGENTD_CLUSTER_TOKEN, compared in constant time. */
  fromNode(token: string | null): boolean {
    if (!this.token || token === null) return false
    const given = Buffer.from(token)
    return given.length === this.token.length && timingSafeEqual(given, this.token)
  }

  /** This node's own beat (the URL and token to send it with are the caller's). */
  ownBeat(): NodeBeat | null {
    const { url, name } = this.deps.node
    return url ? { name, url, maxSandboxes: this.deps.maxSandboxes } : null
  }

  /**
   * The primary records a node's beat (its own included): where it answers, its capacity, when it
   * was heard. The primary's own row also says since when it is primary.
   */
  recordBeat(beat: NodeBeat): void {
    const now = this.deps.now()
    const own = beat.name === this.deps.node.name
    // The first beat of a new primary: it alone is primary from now on, whatever the clocks of those before said.
    const first = own && this.primarySince === null
    if (own) this.primarySince ??= now
    const primarySince = own ? this.primarySince : null
    this.deps.db.transaction((tx) => {
      if (first) tx.update(nodes).set({ primarySince: null }).run()
      tx.insert(nodes)
        .values({ name: beat.name, url: beat.url, maxSandboxes: beat.maxSandboxes, primarySince, heardAt: now })
        .onConflictDoUpdate({
          target: nodes.name,
          set: {
            url: beat.url,
            maxSandboxes: beat.maxSandboxes,
            heardAt: now,
            ...(own ? { primarySince } : {}),
          },
        })
        .run()
    })
  }
}
