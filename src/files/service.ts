import { and, asc, eq, gt, lt, notExists, sql } from 'drizzle-orm'
import { randomBytes } from 'node:crypto'
import type { Db } from '../db/client'
import { files, sessionAttachments } from '../db/schema'
import { ApiError, badRequest } from '../domain/errors'
import { callerOf, type OrgAccess, type Principal } from '../identity/service'
import { writeInTree } from '../../sandbox/host-fs'
import { attachmentName } from './names'

/** An upload as the API shows it (contract section 8). */
export interface UploadedFileView {
  id: string
  name: string
  mime: string
  size: number
  expired_at: string | null
}

/** A session's attachment as CloudRunSession lists it (spec 2.2). */
export interface AttachmentView {
  id: string
  name: string
  mime: string
  size: number
  expired_at: string | null
}

/** A file to attach to a session being created: one already stored, or bytes to store with it. */
export type AttachmentSource =
  | { kind: 'stored'; fileId: string; name: string; size: number }
  | { kind: 'new'; name: string; mime: string; bytes: Uint8Array }

export interface FileServiceDeps {
  db: Db
  /** How long an upload no session uses is kept (7 days, scaled by AGENTD_TIME_SCALE). */
  unusedMs: number
  /** Bytes one caller may store in files (uploads and inline ones) within `unusedMs`. */
  quotaBytes: number
  now: () => number
}

/** The folder of the workspace attachments land in (contract section 8). */
export const ATTACHMENTS_DIR = '.agentd/attachments'

const iso = (ms: number) => new Date(ms).toISOString()

/**
 * Uploads (`POST /o/{org}/files`) and session attachments. Files are rows with their bytes; a
 * session's attachments name them in block order, and are written into the sandbox's workspace
 * before its first turn, through host-fs so a link planted in the workspace is never followed.
 */
export class FileService {
  constructor(private readonly deps: FileServiceDeps) {}

  /** Stores an upload; `name` is the part's file name, `mime` its type. */
  upload(principal: Principal, access: OrgAccess, name: string, mime: string, bytes: Uint8Array): UploadedFileView {
    this.assertQuota(principal, access.orgId, bytes.byteLength)
    const now = this.deps.now()
    const row = {
      id: newFileId(),
      orgId: access.orgId,
      caller: callerOf(principal),
      name: uploadName(name),
      mime: mimeOf(mime),
      size: bytes.byteLength,
      data: Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
      createdAt: now,
      expiresAt: now + this.deps.unusedMs,
    }
    this.deps.db.insert(files).values(row).run()
    return { id: row.id, name: row.name, mime: row.mime, size: row.size, expired_at: iso(row.expiresAt) }
  }

  /**
   * The upload a file block names, as an attachment source: the caller's own, in this org, not
   * expired. Anything else is 400 VALIDATION_ERROR (contract section 8), saying which block.
   */
  stored(principal: Principal, orgId: string, fileId: string, block: number): AttachmentSource {
    const row = this.deps.db
      .select({ id: files.id, name: files.name, size: files.size, expiresAt: files.expiresAt })
      .from(files)
      .where(and(eq(files.id, fileId), eq(files.orgId, orgId), eq(files.caller, callerOf(principal))))
      .get()
    if (!row || row.expiresAt <= this.deps.now())
      throw badRequest(`input[${block}]: file_id ${JSON.stringify(fileId)} names no upload of yours (unknown or expired)`)
    return { kind: 'stored', fileId: row.id, name: row.name, size: row.size }
  }

  /**
   * 429 RATE_LIMITED when `adding` more bytes would take the caller's files stored within the
   * unused-upload window past the quota: a loop of uploads cannot fill the data disk.
   */
  assertQuota(principal: Principal, orgId: string, adding: number): void {
    const since = this.deps.now() - this.deps.unusedMs
    const held = this.deps.db
      .select({ bytes: sql<number>`coalesce(sum(${files.size}), 0)` })
      .from(files)
      .where(and(eq(files.orgId, orgId), eq(files.caller, callerOf(principal)), gt(files.createdAt, since)))
      .get()!.bytes
    if (held + adding > this.deps.quotaBytes) {
      throw new ApiError(
        'rate_limited',
        `Your files of the last 7 days would pass the ${Math.round(this.deps.quotaBytes / 1024 / 1024)} MiB ` +
          'quota; wait for older uploads to expire',
        'RATE_LIMITED',
      )
    }
  }

  /**
   * Records a new session's attachments; call inside the transaction that inserts the session. New
   * bytes are stored as files of the session's caller. Names are made unique within the session.
   */
  attach(principal: Principal, orgId: string, sessionId: string, sources: AttachmentSource[]): void {
    const taken = new Set<string>()
    const now = this.deps.now()
    this.assertQuota(
      principal,
      orgId,
      sources.reduce((sum, s) => sum + (s.kind === 'new' ? s.bytes.byteLength : 0), 0),
    )
    sources.forEach((source, position) => {
      let fileId: string
      if (source.kind === 'stored') {
        // Checked again in the insert's transaction: the sweep may have removed it while the create waited.
        const still = this.deps.db.select({ expiresAt: files.expiresAt }).from(files).where(eq(files.id, source.fileId)).get()
        if (!still || still.expiresAt <= now)
          throw badRequest(`file_id ${JSON.stringify(source.fileId)} expired while the session was being created`)
        fileId = source.fileId
      } else {
        fileId = newFileId()
        const data = Buffer.from(source.bytes.buffer, source.bytes.byteOffset, source.bytes.byteLength)
        const row = {
          id: fileId,
          orgId,
          caller: callerOf(principal),
          name: source.name,
          mime: source.mime,
          size: data.byteLength,
          data,
          createdAt: now,
          expiresAt: now + this.deps.unusedMs,
        }
        this.deps.db.insert(files).values(row).run()
      }
      const name = attachmentName(source.name, taken)
      taken.add(name)
      this.deps.db.insert(sessionAttachments).values({ sessionId, position, fileId, name }).run()
    })
  }

  /** A session's attachments in block order; kept as long as the session (`expired_at` null). */
  attachmentsOf(sessionId: string): AttachmentView[] {
    return this.deps.db
      .select({ id: files.id, name: sessionAttachments.name, mime: files.mime, size: files.size })
      .from(sessionAttachments)
      .innerJoin(files, eq(files.id, sessionAttachments.fileId))
      .where(eq(sessionAttachments.sessionId, sessionId))
      .orderBy(asc(sessionAttachments.position))
      .all()
      .map((row) => ({ ...row, expired_at: null }))
  }

  /**
   * Writes a session's attachments into its workspace (`hostWorkspace` on the host) under
   * ATTACHMENTS_DIR, and returns the lines for the prompt naming each path as the sandbox sees it
   * (`workspace`); null when the session has none.
   */
  place(sessionId: string, hostWorkspace: string, workspace: string): string | null {
    const rows = this.attachmentsOf(sessionId)
    if (rows.length === 0) return null
    // One file's bytes in memory at a time.
    const lines = rows.map((row) => {
      const { data } = this.deps.db.select({ data: files.data }).from(files).where(eq(files.id, row.id)).get()!
      writeInTree(hostWorkspace, `${ATTACHMENTS_DIR}/${row.name}`, data)
      return `- ${workspace}/${ATTACHMENTS_DIR}/${row.name} (${row.mime}, ${row.size} bytes)`
    })
    return `Attached files:\n${lines.join('\n')}`
  }

  /** Removes uploads past their expiry that no session uses; the server calls it periodically. */
  sweep(): number {
    const used = this.deps.db.select({ one: sql`1` }).from(sessionAttachments).where(eq(sessionAttachments.fileId, files.id))
    return this.deps.db
      .delete(files)
      .where(and(lt(files.expiresAt, this.deps.now()), notExists(used)))
      .returning({ id: files.id })
      .all().length
  }
}

/** The file's name as sent; a file part without one is `file`. Never a path: only its last part. */
function uploadName(name: string): string {
  const last = name.split(/[\\/]/).pop()?.trim() ?? ''
  return last === '' ? 'file' : last.slice(0, 255)
}

/** A type of the form `type/subtype`, else application/octet-stream. */
export function mimeOf(mime: string): string {
  const bare = mime.split(';', 1)[0]!.trim().toLowerCase()
  return /^[a-z0-9][a-z0-9!#$&^_.+-]*\/[a-z0-9][a-z0-9!#$&^_.+-]*$/.test(bare) ? bare : 'application/octet-stream'
}

const newFileId = () => `file_${randomBytes(16).toString('hex')}`

/** An upload over its limit: 413 PAYLOAD_TOO_LARGE, as any oversized body. */
export const fileTooLarge = (limitBytes: number) =>
  new ApiError('too_large', `The file is larger than ${limitBytes / 1024 / 1024} MiB`, 'PAYLOAD_TOO_LARGE')
