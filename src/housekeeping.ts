import type { Catalog } from './catalog/catalog'
import type { FileService } from './files/service'
import type { ArtifactStore } from './runtime/artifacts'
import type { HarnessInstaller } from './runtime/harness-install'
import type { SessionStore } from './session-record/store'
import type { SessionService } from './sessions/service'

/** How often, and after how long, blobs no artifact names are deleted (and pinned CLI installs pruned). */
const BLOB_SWEEP_MS = 60 * 60_000

/** Pinned CLI installs kept (the most recently used) beyond those a live session runs. */
const PINNED_INSTALLS_KEPT = 4

export interface HousekeepingDeps {
  sessions: Pick<SessionService, 'expireIdle'>
  files: Pick<FileService, 'sweep'>
  artifacts: Pick<ArtifactStore, 'sweep'>
  installer: Pick<HarnessInstaller, 'prune'>
  store: Pick<SessionStore, 'inStatus'>
  catalog: Catalog
  /** How long a parked session waits before it expires. */
  idleMs: number
  /** AGENTD_TIME_SCALE: tests shorten the hour. */
  timeScale: number
  now: () => number
}

/**
 * What the server does on a clock: parked sessions past the idle limit expire, unused files go, and
 * hourly the blobs no artifact names and the pinned CLI installs nobody runs. Returns its stop.
 */
export function startHousekeeping(deps: HousekeepingDeps): () => void {
  const { now, timeScale } = deps
  let blobsSwept = now()
  const timer = setInterval(
    () => {
      deps.sessions.expireIdle()
      deps.files.sweep()
      // Blobs no artifact names any more (rows gone with their sessions), hourly: it walks every blob.
      if (now() - blobsSwept < BLOB_SWEEP_MS * timeScale) return
      blobsSwept = now()
      deps.artifacts.sweep(BLOB_SWEEP_MS * timeScale)
      // Pinned CLI versions past the most recently used few, unless a live turn's sandbox runs one.
      const live = deps.store.inStatus(['queued', 'allocating', 'running', 'paused']).flatMap((row) => {
        const pkg = deps.catalog.harnesses.find((h) => h.id === row.harness)?.package
        return pkg && row.harnessVersionResolved ? [`${pkg}@${row.harnessVersionResolved}`] : []
      })
      deps.installer.prune(new Set(live), PINNED_INSTALLS_KEPT)
    },
    // Often enough for a scaled idle limit in tests.
    Math.min(60_000, Math.max(50, deps.idleMs / 20)),
  )
  return () => clearInterval(timer)
}
