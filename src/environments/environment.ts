import { eq, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { projectEnvironments } from '../db/schema'
import { ApiError, forbidden, notFound } from '../domain/errors'
import { findProject } from '../identity/projects'
import type { OrgAccess } from '../identity/service'
import { parseAllowEntry } from '../egress/allowlist'

/** `setup` is a bash script of at most 64 KiB (UTF-8 bytes). */
export const MAX_SETUP_BYTES = 64 * 1024
export const DEFAULT_SETUP_TIMEOUT_S = 900
export const MAX_SETUP_TIMEOUT_S = 3600
/** At most this many entries in one Project's `network.allow`. */
export const MAX_ALLOW_ENTRIES = 100

/** A Project's environment as the API shows it (contract section 10). */
export interface EnvironmentView {
  setup: string | null
  setup_timeout_s: number
  network: { allow: string[] }
  /** 0 until the first PUT, then 1 more on each. */
  revision: number
  /** When it was last PUT (ISO 8601); null while it never was (revision 0: the defaults). */
  updated_at: string | null
}

/** A PUT's body: absent fields take their defaults (the whole environment is replaced). */
export interface EnvironmentInput {
  setup?: string | null
  setup_timeout_s?: number
  network?: { allow?: string[] }
}

const DEFAULTS: EnvironmentView = {
  setup: null,
  setup_timeout_s: DEFAULT_SETUP_TIMEOUT_S,
  network: { allow: [] },
  revision: 0,
  updated_at: null,
}

const invalid = (path: string, message: string) =>
  new ApiError('invalid', `${path}: ${message}`, 'VALIDATION_ERROR', { fields: [{ path, message }] })

/**
 * A Project's environment: its setup script, the script's time limit and the hosts its sandboxes
 * may reach. Also where the environment routes find their Project (org admins only).
 */
export class EnvironmentService {
  constructor(private readonly deps: { db: Db; now: () => number }) {}

  /**
   * The id of the Project `ref` (its name, or its id) of the caller's org, for an org admin:
   * 403 for a member, 404 when the org has no such Project (`_` included).
   */
  adminProject(access: OrgAccess, ref: string): string {
    if (access.role !== 'admin') throw forbidden("Only org admins can read or change a Project's environment and secrets")
    const project = findProject(this.deps.db, access.orgId, ref)
    if (!project) throw notFound(`The org has no Project ${ref}`)
    return project.id
  }

  /** The Project's environment; the defaults (revision 0, `updated_at` null) when it was never set. */
  get(projectId: string): EnvironmentView {
    const row = this.deps.db.select().from(projectEnvironments).where(eq(projectEnvironments.projectId, projectId)).get()
    if (!row) return structuredClone(DEFAULTS)
    return {
      setup: row.setup,
      setup_timeout_s: row.setupTimeoutS,
      network: { allow: row.allow },
      revision: row.revision,
      updated_at: new Date(row.updatedAt).toISOString(),
    }
  }

  /**
   * Replaces the Project's environment whole (absent fields take their defaults) and adds 1 to its
   * revision; answers the new one. 400 VALIDATION_ERROR for a `setup` over 64 KiB, a
   * `setup_timeout_s` that is not an integer from 1 to 3600, more than 100 `allow` entries or one
   * that parseAllowEntry refuses.
   */
  put(projectId: string, body: EnvironmentInput): EnvironmentView {
    const setup = body.setup ?? null
    if (setup !== null && Buffer.byteLength(setup, 'utf8') > MAX_SETUP_BYTES) throw invalid('setup', 'is longer than 64 KiB')
    const timeout = body.setup_timeout_s ?? DEFAULT_SETUP_TIMEOUT_S
    if (!Number.isInteger(timeout) || timeout < 1 || timeout > MAX_SETUP_TIMEOUT_S)
      throw invalid('setup_timeout_s', `must be an integer from 1 to ${MAX_SETUP_TIMEOUT_S}`)
    const allow = body.network?.allow ?? []
    if (allow.length > MAX_ALLOW_ENTRIES) throw invalid('network.allow', `holds at most ${MAX_ALLOW_ENTRIES} entries`)
    allow.forEach((entry, i) => {
      if (typeof entry !== 'string' || !parseAllowEntry(entry)) {
        const shown = typeof entry === 'string' ? `${JSON.stringify(entry.slice(0, 100))} ` : ''
        throw invalid(
          `network.allow.${i}`,
          `${shown}is not a host name, *. and a domain, or an IP address (each optionally with :port), nor the word registries`,
        )
      }
    })
    const updatedAt = this.deps.now()
    const values = { setup, setupTimeoutS: timeout, allow, updatedAt }
    this.deps.db
      .insert(projectEnvironments)
      .values({ projectId, ...values, revision: 1 })
      .onConflictDoUpdate({ target: projectEnvironments.projectId, set: { ...values, revision: sql`${projectEnvironments.revision} + 1` } })
      .run()
    return this.get(projectId)
  }
}
