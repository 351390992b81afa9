import { and, asc, count, eq } from 'drizzle-orm'
import type { KeySealer, SealBinding } from '../accounts/seal'
import type { Db } from '../db/client'
import { projectSecrets } from '../db/schema'
import { ApiError, badRequest, notFound, unprocessable } from '../domain/errors'
import { secretNameProblem } from './secret-names'

/** At most this many secrets in one Project (one more is 422 TOO_MANY_SECRETS). */
export const MAX_SECRETS = 100
/** A secret's value: 1 byte to 64 KiB of UTF-8. */
export const MAX_SECRET_BYTES = 64 * 1024

export interface SecretServiceDeps {
  db: Db
  /** The server's sealer: values are kept only sealed, each bound to its Project and name. */
  sealer: KeySealer
  now: () => number
}

/** A secret as the API lists it: its name and when it was last set, never its value. */
export interface SecretEntry {
  name: string
  updated_at: string
}

const binding = (projectId: string, name: string): SealBinding => ({ use: 'project_secret', id: `${projectId}/${name}` })

/** A secret whose sealed value does not open (the server's key changed since it was set). */
export class SecretUnreadableError extends Error {
  constructor(readonly secret: string) {
    super(`the Project secret ${secret} cannot be opened: the server's encryption key changed since it was set; set it again`)
  }
}

/**
 * A Project's secrets (contract section 10). Values go in sealed and come out only to the runtime
 * (`values`), never in an answer, a log line or an error: no message here quotes a value.
 */
export class SecretService {
  constructor(private readonly deps: SecretServiceDeps) {}

  /**
   * Makes or replaces the secret `name` of the Project. 400 VALIDATION_ERROR for a name that is
   * malformed or reserved (secret-names.ts) or a value that is empty, over 64 KiB or holds a NUL
   * (an environment variable cannot); 422 TOO_MANY_SECRETS for a 101st name.
   */
  async set(projectId: string, name: string, value: string): Promise<void> {
    checkName(name)
    const bytes = Buffer.byteLength(value, 'utf8')
    if (bytes === 0)
      throw badRequest('value: a secret is at least 1 byte', 'VALIDATION_ERROR', { fields: [{ path: 'value', message: 'is empty' }] })
    if (bytes > MAX_SECRET_BYTES)
      throw badRequest(`value: a secret is at most 64 KiB (this one is ${bytes} bytes)`, 'VALIDATION_ERROR', {
        fields: [{ path: 'value', message: 'is longer than 64 KiB' }],
      })
    if (value.includes('\0'))
      throw badRequest('value: a secret cannot hold a NUL character (it becomes an environment variable)', 'VALIDATION_ERROR', {
        fields: [{ path: 'value', message: 'holds a NUL character' }],
      })
    const sealed = await this.deps.sealer.sealBound(binding(projectId, name), value)
    const { db, now } = this.deps
    // The count and the write in one transaction: two PUTs at once cannot both make the 101st.
    db.transaction(
      (tx) => {
        const exists = tx
          .select({ name: projectSecrets.name })
          .from(projectSecrets)
          .where(and(eq(projectSecrets.projectId, projectId), eq(projectSecrets.name, name)))
          .get()
        if (!exists) {
          const held = tx.select({ n: count() }).from(projectSecrets).where(eq(projectSecrets.projectId, projectId)).get()?.n ?? 0
          if (held >= MAX_SECRETS)
            throw unprocessable(`A Project holds at most ${MAX_SECRETS} secrets; remove one first`, 'TOO_MANY_SECRETS')
        }
        tx.insert(projectSecrets)
          .values({ projectId, name, sealed, updatedAt: now() })
          .onConflictDoUpdate({ target: [projectSecrets.projectId, projectSecrets.name], set: { sealed, updatedAt: now() } })
          .run()
      },
      { behavior: 'immediate' },
    )
  }

  /** The Project's secrets by name, with when each was last set: never a value. */
  list(projectId: string): SecretEntry[] {
    return this.deps.db
      .select({ name: projectSecrets.name, updatedAt: projectSecrets.updatedAt })
      .from(projectSecrets)
      .where(eq(projectSecrets.projectId, projectId))
      .orderBy(asc(projectSecrets.name))
      .all()
      .map((row) => ({ name: row.name, updated_at: new Date(row.updatedAt).toISOString() }))
  }

  /** Removes the secret; false when the Project has none of that name. */
  remove(projectId: string, name: string): boolean {
    const gone = this.deps.db
      .delete(projectSecrets)
      .where(and(eq(projectSecrets.projectId, projectId), eq(projectSecrets.name, name)))
      .returning({ name: projectSecrets.name })
      .all()
    return gone.length > 0
  }

  /**
   * Every secret of the Project, opened, by name: what the runtime puts in the sandbox's
   * environment. Throws SecretUnreadableError when one no longer opens (the key changed).
   */
  async values(projectId: string): Promise<Record<string, string>> {
    const rows = this.deps.db
      .select()
      .from(projectSecrets)
      .where(eq(projectSecrets.projectId, projectId))
      .orderBy(asc(projectSecrets.name))
      .all()
    const out: Record<string, string> = {}
    for (const row of rows) {
      try {
        out[row.name] = await this.deps.sealer.openBound(binding(projectId, row.name), row.sealed)
      } catch {
        throw new SecretUnreadableError(row.name)
      }
    }
    return out
  }

  /**
   * A fingerprint of the Project's secrets (names and values), hex: equal for equal sets, different
   * when a name or value differs; a Project without secrets has one fixed digest. Keyed under the
   * server's key (KeySealer.digest), so a stored digest reveals nothing of short values.
   */
  async digest(projectId: string): Promise<string> {
    return (await this.snapshot(projectId)).digest
  }

  /** `values` and `digest` from one read: the digest is that of exactly these values. */
  async snapshot(projectId: string): Promise<{ values: Record<string, string>; digest: string }> {
    const values = await this.values(projectId)
    // Names hold no `=` and values no NUL (set refuses them), so `name=value\0` joins unambiguously.
    const text = Object.keys(values)
      .sort()
      .map((name) => `${name}=${values[name]}\0`)
      .join('')
    return { values, digest: this.deps.sealer.digest('project_secrets', text) }
  }

  /** `remove`, with 404 when the Project has no secret of that name (the route's DELETE). */
  removeOrFail(projectId: string, name: string): void {
    if (!this.remove(projectId, name)) throw notFound(`The Project has no secret ${name}`)
  }
}

function checkName(name: string): void {
  const problem = secretNameProblem(name)
  if (problem) throw new ApiError('invalid', `name: ${problem}`, 'VALIDATION_ERROR', { fields: [{ path: 'name', message: problem }] })
}
