import { existsSync, mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { and, desc, eq, inArray } from 'drizzle-orm'
import type { Db } from '../db/client'
import { projectPrebuilds } from '../db/schema'
import { newId } from '../domain/ids'

/**
 * What makes a prebuilt image fit a session: the environment's revision, the commit checked out
 * ('' without a repository), the secrets' digest.
 */
export interface PrebuildKey {
  revision: number
  commit: string
  secretsDigest: string
}

export interface Prebuild {
  id: string
  /** The image file: a sandbox disk, for `SandboxSpec.baseImage`. */
  image: string
}

export interface PrebuildDeps {
  db: Db
  dataDir: string
  /** Images kept per Project, newest first (AGENTD_PREBUILDS_PER_PROJECT). */
  keep: number
  now: () => number
}

/**
 * A Project's prebuilt images: the disk of a sandbox whose setup exited 0, kept under
 * `DATA_DIR/prebuilds/<id>.img` so a later session with the same key skips setup. An image row is
 * written only once its file is whole; `keep` per Project are kept, the older ones deleted with their files.
 */
export class PrebuildService {
  constructor(private readonly deps: PrebuildDeps) {}

  private get dir(): string {
    return join(this.deps.dataDir, 'prebuilds')
  }

  /** The newest image of the Project with this key whose file is there, or null. */
  find(projectId: string, key: PrebuildKey): Prebuild | null {
    const rows = this.deps.db
      .select({ id: projectPrebuilds.id })
      .from(projectPrebuilds)
      .where(
        and(
          eq(projectPrebuilds.projectId, projectId),
          eq(projectPrebuilds.revision, key.revision),
          eq(projectPrebuilds.commit, key.commit),
          eq(projectPrebuilds.secretsDigest, key.secretsDigest),
        ),
      )
      .orderBy(desc(projectPrebuilds.createdAt))
      .all()
    for (const { id } of rows) {
      const image = this.imageOf(id)
      if (existsSync(image)) return { id, image }
    }
    return null
  }

  /**
   * Keeps a new image for the Project: `write(path)` makes the file, then its row is recorded and
   * the Project's images past `keep` are deleted. A write that fails keeps nothing.
   */
  async save(projectId: string, key: PrebuildKey, write: (path: string) => Promise<void>): Promise<Prebuild> {
    mkdirSync(this.dir, { recursive: true, mode: 0o700 })
    const id = newId()
    const image = this.imageOf(id)
    try {
      await write(image)
    } catch (err) {
      rmSync(image, { force: true })
      throw err
    }
    this.deps.db
      .insert(projectPrebuilds)
      .values({ id, projectId, ...key, createdAt: this.deps.now() })
      .run()
    this.prune(projectId)
    return { id, image }
  }

  /** Deletes the Project's images past the newest `keep`. A sandbox made from one has its own copy already. */
  prune(projectId: string): string[] {
    const rows = this.deps.db
      .select({ id: projectPrebuilds.id })
      .from(projectPrebuilds)
      .where(eq(projectPrebuilds.projectId, projectId))
      .orderBy(desc(projectPrebuilds.createdAt), desc(projectPrebuilds.id))
      .all()
    const old = rows.slice(Math.max(0, this.deps.keep)).map((row) => row.id)
    if (old.length === 0) return []
    this.deps.db.delete(projectPrebuilds).where(inArray(projectPrebuilds.id, old)).run()
    for (const id of old) rmSync(this.imageOf(id), { force: true })
    return old
  }

  /** Ids of the Project's images, newest first. */
  list(projectId: string): string[] {
    return this.deps.db
      .select({ id: projectPrebuilds.id })
      .from(projectPrebuilds)
      .where(eq(projectPrebuilds.projectId, projectId))
      .orderBy(desc(projectPrebuilds.createdAt), desc(projectPrebuilds.id))
      .all()
      .map((row) => row.id)
  }

  private imageOf(id: string): string {
    return join(this.dir, `${id}.img`)
  }
}
