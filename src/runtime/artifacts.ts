import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readSync, renameSync, rmSync, statSync, writeSync } from 'node:fs'
import type { BunFile } from 'bun'
import { dirname, join } from 'node:path'
import { and, asc, eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { artifacts } from '../db/schema'
import { readFd, walkFiles } from '../../sandbox/host-fs'

export interface ArtifactFile {
  name: string
  size: number
  content_type: string
}

/** Where a turn's files become artifacts, relative to the workspace (contract section 4). */
export const ARTIFACTS_DIR = '.agentd/artifacts'
/** A session's artifacts are embedded in session reads up to this many (spec section 8). */
export const EMBEDDED_ARTIFACTS = 6
/** AGENTD_ARTIFACTS_MAX_MB's default: 1 GiB of new artifact bytes a turn. */
export const DEFAULT_ARTIFACTS_MAX_BYTES = 1024 * 1024 * 1024

/** What one turn's collect did: the session's artifact count, and the files skipped past the cap. */
export interface Collected {
  count: number
  skipped: { name: string; size: number }[]
}

/**
 * Artifacts: metadata in SQLite, bytes content-addressed under DATA_DIR/blobs, so identical files
 * are stored once and the bytes outlive the sandbox.
 */
export class ArtifactStore {
  private readonly blobs: string
  /** Reused for hashing and copying: artifacts are read in chunks, never whole into memory. */
  private readonly buffer = Buffer.allocUnsafe(1024 * 1024)

  constructor(
    private readonly db: Db,
    dataDir: string,
    private readonly now: () => number,
    /** New bytes one turn may store as artifacts (AGENTD_ARTIFACTS_MAX_MB); past it the rest are skipped. */
    private readonly maxTurnBytes = DEFAULT_ARTIFACTS_MAX_BYTES,
  ) {
    this.blobs = join(dataDir, 'blobs')
  }

  /**
   * Records what is under the workspace's artifacts folder at the end of a turn: new names are
   * appended in the order they were written, changed ones get their new bytes. The folder is the
   * sandbox's: it is walked without following any link, and only regular files are taken.
   * New bytes past the turn's cap are not stored: those files are skipped (as found), and named in
   * what it returns with the session's artifact count.
   */
  collect(sessionId: string, hostWorkspace: string, turn: number): Collected {
    const stored = new Map(
      this.db
        .select()
        .from(artifacts)
        .where(eq(artifacts.sessionId, sessionId))
        .all()
        .map((a) => [a.name, a]),
    )
    const found: { name: string; mtimeMs: number; sha256: string; size: number }[] = []
    const skipped: Collected['skipped'] = []
    let added = 0
    walkFiles(hostWorkspace, ARTIFACTS_DIR, (file) => {
      // A file that fits the buffer is read once: hashed, and stored from the same bytes if new.
      // A bigger one is hashed first and copied only if it changed (most of a turn's files did not).
      const whole = file.size <= this.buffer.length ? readFd(file.fd, file.size, this.buffer) : null
      let read = whole ? { sha256: sha256Of(whole), size: whole.length } : hashFd(file.fd, file.size, this.buffer)
      if (stored.get(file.name)?.sha256 !== read.sha256) {
        if (added + read.size > this.maxTurnBytes) return void skipped.push({ name: file.name, size: read.size })
        added += read.size
        read = whole ? this.storeBlob(whole, read.sha256) : this.copyBlob(file.fd, file.size, read.sha256)
      }
      found.push({ name: file.name, mtimeMs: file.mtimeMs, ...read })
    })
    // Oldest first (the order the agent wrote them), then by name.
    found.sort((a, b) => a.mtimeMs - b.mtimeMs || a.name.localeCompare(b.name))
    let ordinal = stored.size
    const now = this.now()
    const writes: (() => void)[] = []
    for (const { name, sha256, size } of found) {
      const known = stored.get(name)
      if (known?.sha256 === sha256) continue
      const row = { size, contentType: Bun.file(name).type.split(';')[0] || 'application/octet-stream', sha256, turn, updatedAt: now }
      if (known)
        writes.push(() =>
          this.db
            .update(artifacts)
            .set(row)
            .where(and(eq(artifacts.sessionId, sessionId), eq(artifacts.name, name)))
            .run(),
        )
      else {
        const values = { sessionId, name, ordinal: ordinal++, createdAt: now, ...row }
        writes.push(() => this.db.insert(artifacts).values(values).run())
      }
    }
    const replaced = found.flatMap(({ name, sha256 }) => {
      const before = stored.get(name)?.sha256
      return before !== undefined && before !== sha256 ? [before] : []
    })
    if (writes.length) this.db.transaction(() => writes.forEach((w) => w()))
    // A blob no artifact names any more (its file was rewritten) goes now: blobs live as long as an artifact holds them.
    for (const sha256 of replaced) this.dropIfUnused(sha256)
    return { count: ordinal, skipped }
  }

  /** Deletes the blob `sha256` when no artifact row names it (blobs are shared by content across sessions). */
  private dropIfUnused(sha256: string): boolean {
    const used = this.db.select({ n: sql<number>`count(*)` }).from(artifacts).where(eq(artifacts.sha256, sha256)).get()?.n ?? 0
    if (used > 0) return false
    rmSync(this.blobPath(sha256), { force: true })
    return true
  }

  /**
   * Deletes blobs no artifact names (their sessions' rows went, or a crash came between a blob and
   * its row) and temp files, once older than `graceMs`: a collect in progress writes its blobs
   * before their rows. The server runs it now and then. Returns how many it deleted.
   */
  sweep(graceMs = 60 * 60_000): number {
    const cutoff = this.now() - graceMs
    // Every hash an artifact names, read once: the walk below then asks no query per blob.
    const named = new Set(
      this.db
        .selectDistinct({ sha256: artifacts.sha256 })
        .from(artifacts)
        .all()
        .map((row) => row.sha256),
    )
    let deleted = 0
    for (const dir of existsSync(this.blobs) ? readdirSync(this.blobs) : []) {
      const folder = join(this.blobs, dir)
      const isTemp = dir.startsWith('.') && dir.endsWith('.tmp')
      try {
        if (isTemp) {
          if (statSync(folder).mtimeMs < cutoff) {
            rmSync(folder, { force: true })
            deleted++
          }
          continue
        }
        for (const name of readdirSync(folder)) {
          if (named.has(name) || statSync(join(folder, name)).mtimeMs >= cutoff) continue
          // Asked again for the one about to go: a collect may have named it since the read above.
          if (this.dropIfUnused(name)) deleted++
        }
      } catch {
        // gone meanwhile
      }
    }
    return deleted
  }

  /** Stores `bytes` (whose hash is `sha256`) as a blob, unless it is there already. */
  private storeBlob(bytes: Uint8Array, sha256: string): { sha256: string; size: number } {
    if (existsSync(this.blobPath(sha256))) return { sha256, size: bytes.length }
    const temp = this.tempBlob()
    try {
      for (let done = 0; done < bytes.length; ) done += writeSync(temp.fd, bytes, done, bytes.length - done)
    } catch (err) {
      temp.discard()
      throw err
    }
    temp.keep(sha256)
    return { sha256, size: bytes.length }
  }

  /**
   * A new temp file among the blobs (0600, a unique name created here and now), renamed to its
   * hash's name once whole: a crash never leaves a half blob under its final name.
   */
  private tempBlob(): { fd: number; discard(): void; keep(sha256: string): void } {
    mkdirSync(this.blobs, { recursive: true, mode: 0o700 })
    const path = join(this.blobs, `.${crypto.randomUUID()}.tmp`)
    const fd = openSync(path, 'wx', 0o600)
    return {
      fd,
      discard: () => {
        closeSync(fd)
        rmSync(path, { force: true })
      },
      keep: (sha256) => {
        closeSync(fd)
        const final = this.blobPath(sha256)
        mkdirSync(dirname(final), { recursive: true, mode: 0o700 })
        renameSync(path, final)
      },
    }
  }

  /**
   * Stores the first `size` bytes of `fd` as a blob named by their hash, unless it is there
   * already. The bytes are hashed again as they are copied: a file the sandbox changed meanwhile
   * is stored under the hash of what was copied, which is returned with its size.
   */
  private copyBlob(fd: number, size: number, sha256: string): { sha256: string; size: number } {
    if (existsSync(this.blobPath(sha256))) return { sha256, size }
    const temp = this.tempBlob()
    const hash = new Bun.CryptoHasher('sha256')
    let at = 0
    try {
      while (at < size) {
        const n = readSync(fd, this.buffer, 0, Math.min(this.buffer.length, size - at), at)
        if (n <= 0) break
        const chunk = this.buffer.subarray(0, n)
        hash.update(chunk)
        for (let done = 0; done < n; ) done += writeSync(temp.fd, chunk, done, n - done)
        at += n
      }
    } catch (err) {
      temp.discard()
      throw err
    }
    const copied = hash.digest('hex')
    temp.keep(copied)
    return { sha256: copied, size: at }
  }

  private blobPath(sha256: string): string {
    return join(this.blobs, sha256.slice(0, 2), sha256)
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

  /**
   * One artifact's stored bytes, as a file to stream (never read whole into memory: a 1 GiB
   * artifact downloaded by many clients at once costs the server no more than their buffers),
   * with its content type; null when there is none of that name.
   */
  read(sessionId: string, name: string): { file: BunFile; contentType: string } | null {
    const row = this.db
      .select()
      .from(artifacts)
      .where(and(eq(artifacts.sessionId, sessionId), eq(artifacts.name, name)))
      .get()
    if (!row) return null
    return { file: Bun.file(this.blobPath(row.sha256)), contentType: row.contentType }
  }
}

function sha256Of(bytes: Uint8Array): string {
  return new Bun.CryptoHasher('sha256').update(bytes).digest('hex')
}

/** The sha256 of the first `size` bytes of `fd` (fewer if it shrank since), read through `buffer`. */
function hashFd(fd: number, size: number, buffer: Buffer): { sha256: string; size: number } {
  const hash = new Bun.CryptoHasher('sha256')
  let at = 0
  while (at < size) {
    const n = readSync(fd, buffer, 0, Math.min(buffer.length, size - at), at)
    if (n <= 0) break
    hash.update(buffer.subarray(0, n))
    at += n
  }
  return { sha256: hash.digest('hex'), size: at }
}
