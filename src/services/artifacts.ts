import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { and, asc, eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { artifacts } from '../db/schema'

export interface ArtifactFile {
  name: string
  size: number
  content_type: string
}

/** Where a turn's files become artifacts, relative to the workspace (contract section 4). */
export const ARTIFACTS_DIR = '.agentd/artifacts'
/** A session's artifacts are embedded in session reads up to this many (spec section 8). */
export const EMBEDDED_ARTIFACTS = 6

/**
 * Artifacts: metadata in SQLite, bytes content-addressed under DATA_DIR/blobs, so identical files
 * are stored once and the bytes outlive the sandbox.
 */
export class ArtifactStore {
  private readonly blobs: string

  constructor(
    private readonly db: Db,
    dataDir: string,
    private readonly now: () => number,
  ) {
    this.blobs = join(dataDir, 'blobs')
  }

  /**
   * Records what is under the workspace's artifacts folder at the end of a turn: new names are
   * appended in the order they were written, changed ones get their new bytes.
   * Returns the session's artifact count.
   */
  collect(sessionId: string, hostWorkspace: string, turn: number): number {
    const root = join(hostWorkspace, ARTIFACTS_DIR)
    const files = existsSync(root) ? listFiles(root) : []
    const stored = new Map(this.db.select().from(artifacts).where(eq(artifacts.sessionId, sessionId)).all().map((a) => [a.name, a]))
    let ordinal = stored.size
    const now = this.now()
    const writes: (() => void)[] = []
    for (const path of files) {
      const name = relative(root, path)
      const bytes = readFileSync(path)
      const sha256 = createHash('sha256').update(bytes).digest('hex')
      const known = stored.get(name)
      if (known?.sha256 === sha256) continue
      this.writeBlob(sha256, bytes)
      const row = { size: bytes.length, contentType: Bun.file(path).type.split(';')[0] || 'application/octet-stream', sha256, turn, updatedAt: now }
      if (known) writes.push(() => this.db.update(artifacts).set(row).where(and(eq(artifacts.sessionId, sessionId), eq(artifacts.name, name))).run())
      else {
        const values = { sessionId, name, ordinal: ordinal++, createdAt: now, ...row }
        writes.push(() => this.db.insert(artifacts).values(values).run())
      }
    }
    if (writes.length) this.db.transaction(() => writes.forEach((w) => w()))
    return ordinal
  }

  private writeBlob(sha256: string, bytes: Uint8Array): void {
    const dir = join(this.blobs, sha256.slice(0, 2))
    const path = join(dir, sha256)
    if (existsSync(path)) return
    mkdirSync(dir, { recursive: true })
    // Write then rename, so a crash never leaves a half blob under its final name.
    writeFileSync(`${path}.tmp`, bytes)
    renameSync(`${path}.tmp`, path)
  }

  /** A session's artifacts in upload order, optionally only the first `limit`. */
  list(sessionId: string, limit?: number): ArtifactFile[] {
    const query = this.db
      .select({ name: artifacts.name, size: artifacts.size, content_type: artifacts.contentType })
      .from(artifacts)
      .where(eq(artifacts.sessionId, sessionId))
      .orderBy(asc(artifacts.ordinal))
    return limit === undefined ? query.all() : query.limit(limit).all()
  }

  count(sessionId: string): number {
    return this.db.select({ n: sql<number>`count(*)` }).from(artifacts).where(eq(artifacts.sessionId, sessionId)).get()?.n ?? 0
  }

  /** The stored bytes and content type of one artifact, or null when there is none of that name. */
  read(sessionId: string, name: string): { bytes: Uint8Array; contentType: string } | null {
    const row = this.db
      .select()
      .from(artifacts)
      .where(and(eq(artifacts.sessionId, sessionId), eq(artifacts.name, name)))
      .get()
    if (!row) return null
    return { bytes: readFileSync(join(this.blobs, row.sha256.slice(0, 2), row.sha256)), contentType: row.contentType }
  }
}

/** Every file below `dir`, oldest first (the order the agent wrote them), then by name. */
function listFiles(dir: string): string[] {
  const found: { path: string; mtime: number }[] = []
  const walk = (at: string) => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name)
      if (entry.isDirectory()) walk(path)
      else if (entry.isFile()) found.push({ path, mtime: statSync(path).mtimeMs })
    }
  }
  walk(dir)
  return found.sort((a, b) => a.mtime - b.mtime || a.path.localeCompare(b.path)).map((f) => f.path)
}
