import { randomBytes, timingSafeEqual, createHash } from 'node:crypto'
import { and, desc, eq, isNull } from 'drizzle-orm'
import type { Db } from '../db/client'
import { DataCache, DataVersion } from '../db/data-version'
import { apiKeys, memberships, users } from '../db/schema'
import { API_KEY_PREFIX, isLive, type ApiKeyScope } from '../domain/api-keys'
import { ApiError, badRequest, forbidden, notFound } from '../domain/errors'
import { liveKeys } from './live'
import type { OrgAccess, Principal } from '../identity/service'
import type { WebhookService } from '../webhooks/service'
import { iso } from '../domain/values'

/** `prefix` shown for a key: the live prefix and the first 8 random characters. */
const PREFIX_LENGTH = API_KEY_PREFIX.length + 8
// last_used_at is written at most this often per key, not on every request.
const TOUCH_EVERY_MS = 1_000

type KeyRow = typeof apiKeys.$inferSelect

interface FoundKey {
  keyId: string
  principal: Principal
  expiresAt: number | null
  /** Kept current here, so the touch is written once per TOUCH_EVERY_MS, not on every request. */
  lastUsedAt: number | null
}

export interface CreateKeyBody {
  name: string
  scopes?: ApiKeyScope[]
  max_concurrent?: number
  expires_at?: string | null
}

export interface UpdateKeyBody {
  webhook_url?: string | null
  rotate_secret?: boolean
}

const digest = (secret: string) => createHash('sha256').update(secret).digest()
const newSecret = () => `${API_KEY_PREFIX}${randomBytes(32).toString('base64url')}`
const newWebhookSecret = () => `whsec_${randomBytes(32).toString('base64')}`

/**
 * Org API keys (spec 4.5): mint, list, set the webhook, rotate, revoke; and the bearer check that
 * turns a key secret into a Principal acting as the key's creator.
 */
export class ApiKeyService {
  private readonly now: () => number
  /**
   * Keys by their secret's digest, as the identity caches keep tokens: a server holding a key
   * polls with it. Dropped when anything that decides a key's Principal may have changed (see
   * DataVersion); expiry is checked on each use.
   */
  private readonly found: DataCache<FoundKey>
  private readonly dataVersion: DataVersion

  constructor(
    private readonly db: Db,
    private readonly webhooks: WebhookService,
    now?: () => number,
    /** False on a replica of a region, whose database is read-only: a key's use is recorded where it is written. */
    private readonly recordsUse = true,
  ) {
    this.now = now ?? Date.now
    this.dataVersion = DataVersion.of(db.$client)
    this.found = new DataCache(this.dataVersion)
  }

  /**
   * The Principal for a key secret, or null when it is unknown, revoked, expired, or its creator
   * is no longer in the key's org. Candidates are found by the non-secret prefix and the hash is
   * compared in constant time.
   */
  authenticate(secret: string): Principal | null {
    const now = this.now()
    const given = digest(secret)
    const cacheKey = given.toString('hex')
    let entry = this.found.get(cacheKey)
    if (!entry) {
      const looked = this.lookup(secret, given)
      if (!looked) return null
      this.found.set(cacheKey, (entry = looked))
    }
    if (entry.expiresAt !== null && entry.expiresAt <= now) return null
    if (this.recordsUse && (entry.lastUsedAt === null || now - entry.lastUsedAt >= TOUCH_EVERY_MS)) {
      this.db.update(apiKeys).set({ lastUsedAt: now }).where(eq(apiKeys.id, entry.keyId)).run()
      entry.lastUsedAt = now
    }
    return entry.principal
  }

  /** The live key behind a secret, with its creator still in its org; null when there is none. */
  private lookup(secret: string, given: Buffer): FoundKey | null {
    const candidates = this.db
      .select({ key: apiKeys, user: users })
      .from(apiKeys)
      .innerJoin(users, eq(users.id, apiKeys.createdByUserId))
      .innerJoin(memberships, and(eq(memberships.orgId, apiKeys.orgId), eq(memberships.userId, apiKeys.createdByUserId)))
      .where(and(eq(apiKeys.prefix, secret.slice(0, PREFIX_LENGTH)), isNull(apiKeys.revokedAt)))
      .all()
    const found = candidates.find(({ key }) => timingSafeEqual(Buffer.from(key.secretHash, 'hex'), given))
    if (!found) return null
    const { key, user } = found
    return {
      keyId: key.id,
      expiresAt: key.expiresAt,
      lastUsedAt: key.lastUsedAt,
      principal: {
        userId: user.id,
        email: user.email,
        name: user.name,
        avatarUrl: user.avatarUrl,
        via: 'api_key',
        apiKey: { id: key.id, orgId: key.orgId, scopes: key.scopes, maxConcurrent: key.maxConcurrent },
      },
    }
  }

  /** Every live key of the org, newest first (admins only). */
  list(access: OrgAccess) {
    requireAdmin(access, 'list API keys')
    const now = this.now()
    const rows = this.db
      .select()
      .from(apiKeys)
      .where(and(eq(apiKeys.orgId, access.orgId), liveKeys(now)))
      .orderBy(desc(apiKeys.createdAt), desc(apiKeys.id))
      .all()
    return { data: rows.map((row) => this.view(row)) }
  }

  create(principal: Principal, access: OrgAccess, body: CreateKeyBody) {
    requireAdmin(access, 'create API keys')
    if (!principal.userId) throw forbidden('Only a known user can create API keys')
    if (body.name.trim() === '') throw invalid('name', 'must not be blank')
    const now = this.now()
    let expiresAt: number | null = null
    if (body.expires_at !== undefined && body.expires_at !== null) {
      expiresAt = Date.parse(body.expires_at)
      if (!Number.isFinite(expiresAt)) throw invalid('expires_at', 'must be a date-time')
      if (expiresAt <= now) throw invalid('expires_at', 'must be in the future')
      const limit = new Date(now)
      limit.setUTCFullYear(limit.getUTCFullYear() + 1)
      if (expiresAt > limit.getTime()) throw invalid('expires_at', 'must be at most one year ahead')
    }
    const secret = newSecret()
    const row: KeyRow = {
      id: `key_${randomBytes(12).toString('hex')}`,
      orgId: access.orgId,
      name: body.name,
      prefix: secret.slice(0, PREFIX_LENGTH),
      secretHash: digest(secret).toString('hex'),
      scopes: body.scopes ?? ['runs:read', 'runs:write'],
      maxConcurrent: body.max_concurrent ?? 4,
      webhookUrl: null,
      webhookSecret: null,
      expiresAt,
      createdByUserId: principal.userId,
      lastUsedAt: null,
      createdAt: now,
      revokedAt: null,
    }
    this.db.insert(apiKeys).values(row).run()
    return { ...this.view(row), secret }
  }

  /**
   * Sets or clears the webhook, or rotates its secret (creator only). The secret is minted when
   * the key first gets a URL and on `rotate_secret`, kept when the URL changes, removed with it.
   */
  async update(principal: Principal, access: OrgAccess, keyId: string, body: UpdateKeyBody) {
    let key = this.live(access, keyId)
    requireCreator(principal, key, 'change its webhook')
    if (typeof body.webhook_url === 'string') {
      const problem = await this.webhooks.urlProblem(body.webhook_url)
      if (problem) throw invalid('webhook_url', problem)
    }
    // The URL check awaited; read the key again so a concurrent revoke is not undone.
    key = this.live(access, keyId)
    const url = body.webhook_url === undefined ? key.webhookUrl : body.webhook_url
    if (body.rotate_secret && url === null) throw invalid('rotate_secret', 'needs a webhook_url')
    let minted: string | null = null
    const set: Partial<KeyRow> = {}
    if (url === null) {
      set.webhookUrl = null
      set.webhookSecret = null
    } else {
      set.webhookUrl = url
      if (key.webhookSecret === null || body.rotate_secret) set.webhookSecret = minted = newWebhookSecret()
    }
    const updated = this.db.transaction(() => {
      if (url === null && key.webhookUrl !== null) this.webhooks.dropPending(key.id, 'webhook cleared')
      return this.db.update(apiKeys).set(set).where(eq(apiKeys.id, key.id)).returning().get()!
    })
    return { ...this.view(updated), ...(minted ? { webhook_secret: minted } : {}) }
  }

  /** Revokes a key (any admin): its next use is refused and pending webhook retries are dropped. */
  revoke(access: OrgAccess, keyId: string): void {
    requireAdmin(access, 'revoke API keys')
    const key = this.inOrg(access, keyId)
    if (!key || key.revokedAt !== null) throw notFound('API key not found')
    this.db.transaction(() => {
      this.db.update(apiKeys).set({ revokedAt: this.now() }).where(eq(apiKeys.id, key.id)).run()
      this.webhooks.dropPending(key.id, 'key revoked')
    })
    this.dataVersion.bump()
  }

  /** A new secret for the key (creator only); the old one stops working at once, expiry is kept. */
  rotate(principal: Principal, access: OrgAccess, keyId: string) {
    const key = this.live(access, keyId)
    requireCreator(principal, key, 'rotate it')
    const secret = newSecret()
    const updated = this.db
      .update(apiKeys)
      .set({ prefix: secret.slice(0, PREFIX_LENGTH), secretHash: digest(secret).toString('hex') })
      .where(eq(apiKeys.id, key.id))
      .returning()
      .get()!
    this.dataVersion.bump()
    return { ...this.view(updated), secret }
  }

  /** The key's webhook deliveries with every attempt (admins; revoked keys included). */
  deliveries(access: OrgAccess, keyId: string, limit: number) {
    requireAdmin(access, 'read webhook deliveries')
    const key = this.inOrg(access, keyId)
    if (!key) throw notFound('API key not found')
    return {
      data: this.webhooks.deliveriesOf(key.id, limit).map((d) => ({
        id: d.id,
        run_id: d.sessionId,
        type: d.type,
        state: d.state,
        reason: d.reason,
        attempts: d.attemptRows.map((a) => ({
          attempt: a.attempt,
          attempted_at: iso(a.attemptedAt)!,
          url: a.url,
          status_code: a.statusCode,
          latency_ms: a.latencyMs,
          error: a.error,
        })),
        next_attempt_at: iso(d.nextAttemptAt),
        created_at: iso(d.createdAt)!,
        finished_at: iso(d.finishedAt),
      })),
    }
  }

  private inOrg(access: OrgAccess, keyId: string): KeyRow | null {
    return (
      this.db
        .select()
        .from(apiKeys)
        .where(and(eq(apiKeys.id, keyId), eq(apiKeys.orgId, access.orgId)))
        .get() ?? null
    )
  }

  /** A key that is neither revoked nor expired; anything else is 404 (spec 4.5 rotate). */
  private live(access: OrgAccess, keyId: string): KeyRow {
    const key = this.inOrg(access, keyId)
    if (!key || !isLive(key, this.now())) throw notFound('API key not found')
    return key
  }

  private view(row: KeyRow) {
    const creator = this.db.select({ email: users.email }).from(users).where(eq(users.id, row.createdByUserId)).get()
    return {
      id: row.id,
      name: row.name,
      prefix: row.prefix,
      scopes: row.scopes,
      max_concurrent: row.maxConcurrent,
      webhook_url: row.webhookUrl,
      expires_at: iso(row.expiresAt),
      created_by: { id: row.createdByUserId, email: creator?.email ?? null },
      last_used_at: iso(row.lastUsedAt),
      created_at: iso(row.createdAt)!,
    }
  }
}

function requireAdmin(access: OrgAccess, what: string): void {
  if (access.role !== 'admin') throw forbidden(`Only org admins can ${what}`)
}

function requireCreator(principal: Principal, key: KeyRow, what: string): void {
  if (principal.userId !== key.createdByUserId) throw forbidden(`Only the key's creator can ${what}`)
}

function invalid(path: string, message: string): ApiError {
  return badRequest(`${path}: ${message}`, 'VALIDATION_ERROR', { fields: [{ path, message }] })
}
