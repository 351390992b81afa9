import { dirname } from 'node:path'
import { type Config, ConfigError } from '../config'
import { openDb, privateDataDir, waitForSchema } from '../db/client'
import type { LogFields } from '../domain/log'
import { sendBeat } from './forward'
import { LiteFsMount } from './litefs'
import { RegionService } from './service'

/** How often a node looks whether its role changed or its LiteFS went away. */
const ROLE_CHECK_MS = 500

/** How long a replica's start waits for the primary's migrations to reach it. */
const SCHEMA_WAIT_MS = 60_000

/**
 * Opens the database as this node's role asks and starts its place in the region (contract
 * section 12): the primary migrates and writes it; a replica opens LiteFS's copy read-only, once
 * the primary's migrations are in it. Every node beats to the primary, which records it.
 */
export async function openNode(config: Config, now: () => number, log: (line: string, fields?: LogFields) => void) {
  const mount = LiteFsMount.of(config.dbPath)
  // A node's name marks where its sessions' sandboxes live: a hostname that changes with a re-created
  // container would have every one of them taken for lost.
  if (mount && (!config.node.url || !config.node.clusterToken || !config.node.named)) {
    throw new ConfigError(
      `the database is in a LiteFS mount (${mount.dir}): a node of a region needs AGENTD_NODE (its lasting name), ` +
        'AGENTD_NODE_URL (where the other nodes reach it) and AGENTD_CLUSTER_TOKEN',
    )
  }
  // Measured: Litestream keeps its own files beside the database (`.agentd.db-litestream/`), which a
  // LiteFS mount refuses (mkdir: operation not permitted), so it would fail every second and back up
  // nothing, on the primary and the replicas alike.
  if (mount && config.litestreamUrl) {
    throw new ConfigError(
      `AGENTD_LITESTREAM_URL cannot replicate a database in a LiteFS mount (${mount.dir}): Litestream keeps its own files beside ` +
        'the database, which LiteFS refuses. Back a region up from LiteFS itself (`litefs export` on the primary), or unset it',
    )
  }
  const replica = mount !== null && !mount.isPrimary()
  if (replica && !(await waitForSchema(config.dbPath, SCHEMA_WAIT_MS))) {
    throw new Error(`this replica's database has not received the primary's schema after ${SCHEMA_WAIT_MS / 1000} s: is the primary up?`)
  }
  // DATA_DIR holds the rest (sandboxes, blobs, the instance key) on this node's own disk; openDb
  // makes it when the database is in it, and this when AGENTD_DB_DIR is elsewhere.
  if (dirname(config.dbPath) !== config.dataDir) privateDataDir(config.dataDir, log)
  const database = openDb(config.dbPath, { backgroundCheckpoint: true, replica, inLiteFs: mount !== null, warn: log })
  const region = new RegionService({ db: database.db, mount, node: config.node, maxSandboxes: config.capacity.maxSandboxes, now })
  if (mount) log(`agentd: node ${config.node.name} of a region (LiteFS at ${mount.dir}), ${region.role()}`)
  const beat = async () => {
    const own = region.ownBeat()
    if (!own) return
    if (region.role() === 'primary') return region.recordBeat(own)
    const primary = region.primaryUrl()
    if (primary && config.node.clusterToken) await sendBeat(primary, config.node.clusterToken, own)
  }
  const beating = mount
    ? setInterval(
        () => beat().catch((err) => log(`agentd: heartbeat to the primary failed: ${(err as Error).message}`)),
        config.node.timeoutMs / 3,
      )
    : null
  beating?.unref()
  if (mount) await beat().catch((err) => log(`agentd: heartbeat to the primary failed: ${(err as Error).message}`))
  // A role that changes under a running node (a lease moved, a LiteFS restarted to promote it by
  // hand) asks for a restart: the next start opens the database in its new role (a new primary
  // takes the actors over as after any restart).
  let watching: ReturnType<typeof setInterval> | null = null
  const changed = new Promise<string>((resolve) => {
    if (!mount) return
    const role = region.role()
    watching = setInterval(() => {
      if (!mount.mounted()) resolve(`its LiteFS mount ${mount.dir} is gone`)
      else if (region.role() !== role) resolve(`it is now the ${region.role()} (it started as the ${role})`)
    }, ROLE_CHECK_MS)
    watching.unref()
  })
  return {
    database,
    region,
    /** Settles (with why) when this node must restart to take its new role. */
    changed,
    /** A replica runs no session's actor and writes nothing: the primary does. */
    replica,
    stop: () => {
      if (beating) clearInterval(beating)
      if (watching) clearInterval(watching)
    },
  }
}
