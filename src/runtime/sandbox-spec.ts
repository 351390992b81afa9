import { join } from 'node:path'
import type { SandboxLimits, SandboxSpec } from '../../sandbox/driver'

const projectRoot = join(import.meta.dir, '..', '..')

export interface SandboxPlace {
  dataDir: string
  /** Where pinned harness versions are installed (read-only inside). */
  installerRoot: string
  gateway: { host: string; port: number }
  limits: SandboxLimits
}

/** A session's sandbox folder under DATA_DIR: workspace, home and the driver's state. */
export function sandboxDir(dataDir: string, id: string): string {
  return join(dataDir, 'sandboxes', id)
}

/** The sandbox of session `id`: its folders, what it may read (the bundled and pinned CLIs), its gateway and limits. */
export function sandboxSpec(place: SandboxPlace, id: string): SandboxSpec {
  const dir = sandboxDir(place.dataDir, id)
  return {
    id,
    hostWorkspace: join(dir, 'workspace'),
    hostHome: join(dir, 'home'),
    stateDir: join(dir, 'sandbox'),
    readOnlyPaths: [join(projectRoot, 'node_modules'), place.installerRoot],
    gateway: place.gateway,
    limits: place.limits,
  }
}
