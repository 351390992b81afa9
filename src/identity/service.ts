import { and, eq, isNull, or, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { DataVersion } from '../db/data-version'
import { memberships, orgs, projects, users, userTokens, type Role } from '../db/schema'
import type { ApiKeyScope } from '../domain/api-keys'
import { newId, newUserToken, sha256 } from '../domain/ids'
import { LookupCache } from '../db/lookup-cache'

/** Who is calling: a signed-in user (token or identity-provider JWT), or an org API key acting as its creator. */
export interface Principal {
  userId: string | null
  email: string
  name: string | null
  avatarUrl: string | null
  via: 'user_token' | 'oidc' | 'api_key'
  /** Set when the bearer is an API key; the user fields are then its creator's (spec section 5). */
  apiKey?: KeyPrincipal
}

/** Who a request acts as, for what belongs to a caller (uploads, Idempotency-Keys): the API key when there is one, else the user. */
export const callerOf = (principal: Principal): string =>
  principal.apiKey ? `key:${principal.apiKey.id}` : `user:${principal.userId ?? principal.email}`

/** The API key behind a Principal: only its own org, only its scopes, at most `maxConcurrent` runs. */
export interface KeyPrincipal {
  id: string
  orgId: string
  scopes: readonly ApiKeyScope[]
  maxConcurrent: number
}

export interface OrgAccess {
  orgId: string
  slug: string
  role: Role
}

export class IdentityError extends Error {}

const SLUG = /^[a-z0-9][a-z0-9-]{0,62}$/
const HANDLE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/
const EMAIL = /^[^\s@]+@[^\s@]+$/

/** Orgs, users, memberships, signed-in tokens and projects: what the admin CLI manages (plans: src/plans). */
export class IdentityService {
  // Prepared once and cached: these run on every authenticated request.
  private readonly byTokenHash
  private readonly accessQuery
  private readonly tokenCache: LookupCache<Principal | null>
  private readonly accessCache: LookupCache<OrgAccess | null>

  constructor(
    private readonly db: Db,
    private readonly now: () => number = Date.now,
  ) {
    this.byTokenHash = db
      .select({ user: users, expiresAt: userTokens.expiresAt })
      .from(userTokens)
      .innerJoin(users, eq(users.id, userTokens.userId))
      .where(and(eq(userTokens.tokenHash, sql.placeholder('hash')), isNull(userTokens.revokedAt)))
      .prepare()
    this.accessQuery = db
      .select({ orgId: orgs.id, slug: orgs.slug, role: memberships.role })
      .from(orgs)
      .innerJoin(memberships, and(eq(memberships.orgId, orgs.id), eq(memberships.userId, sql.placeholder('userId'))))
      .where(or(eq(orgs.slug, sql.placeholder('org')), eq(orgs.id, sql.placeholder('org'))))
      .prepare()
    this.tokenCache = new LookupCache(db.$client, now)
    this.accessCache = new LookupCache(db.$client, now)
  }

  /** Every write here may change who a token is or what a role allows. */
  private changed(): void {
    DataVersion.of(this.db.$client).bump()
  }

  createOrg(slug: string) {
    if (!SLUG.test(slug)) throw new IdentityError(`org slug must be lower-case letters, digits and dashes: "${slug}"`)
    if (this.db.select().from(orgs).where(eq(orgs.slug, slug)).get()) throw new IdentityError(`org "${slug}" exists`)
    const org = { id: newId(), slug, createdAt: this.now() }
    this.db.insert(orgs).values(org).run()
    this.changed()
    return { id: org.id, slug }
  }

  orgBySlug(slug: string) {
    const org = this.db.select().from(orgs).where(eq(orgs.slug, slug)).get()
    if (!org) throw new IdentityError(`no org "${slug}"`)
    return org
  }

  createUser(orgSlug: string, email: string, role: Role) {
    if (!EMAIL.test(email)) throw new IdentityError(`not an email address: "${email}"`)
    if (role !== 'admin' && role !== 'member') throw new IdentityError(`role must be admin or member, got "${role}"`)
    const org = this.orgBySlug(orgSlug)
    this.changed()
    return this.db.transaction((tx) => {
      let user = tx.select().from(users).where(eq(users.email, email)).get()
      if (!user) {
        user = { id: newId(), email, name: email.split('@')[0] ?? null, avatarUrl: null, createdAt: this.now() }
        tx.insert(users).values(user).run()
      }
      tx.insert(memberships)
        .values({ orgId: org.id, userId: user.id, role, createdAt: this.now() })
        .onConflictDoUpdate({ target: [memberships.orgId, memberships.userId], set: { role } })
        .run()
      const token = this.issueToken(user.id, tx)
      return { id: user.id, email, role, token }
    })
  }

  tokenFor(email: string) {
    const user = this.db.select().from(users).where(eq(users.email, email)).get()
    if (!user) throw new IdentityError(`no user "${email}"`)
    this.changed()
    return { token: this.issueToken(user.id) }
  }

  private issueToken(userId: string, tx: Pick<Db, 'insert'> = this.db): string {
    const token = newUserToken()
    tx.insert(userTokens)
      .values({ tokenHash: sha256(token), userId, createdAt: this.now() })
      .run()
    return token
  }

  /** The user behind a signed-in token, or null for an unknown or revoked one. */
  userByToken(token: string): Principal | null {
    const hash = sha256(token)
    return this.tokenCache.get(hash, () => {
      const row = this.byTokenHash.get({ hash })
      if (!row || (row.expiresAt !== null && row.expiresAt <= this.now())) return null
      const { user } = row
      return { userId: user.id, email: user.email, name: user.name, avatarUrl: user.avatarUrl, via: 'user_token' as const }
    })
  }

  userByEmail(email: string) {
    return this.db.select().from(users).where(eq(users.email, email)).get() ?? null
  }

  /** The caller's role in an org named by slug or id; null means "no role" (the caller gets 404). */
  /** The orgs a signed-in user belongs to, by slug, with the role in each. */
  orgsOf(userId: string): OrgAccess[] {
    return this.db
      .select({ orgId: orgs.id, slug: orgs.slug, role: memberships.role })
      .from(memberships)
      .innerJoin(orgs, eq(orgs.id, memberships.orgId))
      .where(eq(memberships.userId, userId))
      .orderBy(orgs.slug)
      .all()
  }

  orgAccess(principal: Principal, orgRef: string): OrgAccess | null {
    const userId = principal.userId
    if (!userId) return null
    return this.accessCache.get(`${userId} ${orgRef}`, () => this.accessQuery.get({ userId, org: orgRef }) ?? null)
  }

  /** `githubInstallation`: the org's installation link its runs go through (checked by the caller). */
  /** Binds a Project to no repository (and no installation): its runs then start in an empty workspace. */
  unbindProject(orgSlug: string, name: string) {
    const org = this.orgBySlug(orgSlug)
    const updated = this.db
      .update(projects)
      .set({ repoOwner: null, repoName: null, githubInstallation: null })
      .where(and(eq(projects.orgId, org.id), eq(projects.name, name)))
      .returning({ id: projects.id })
      .all()
    if (updated.length === 0) throw new IdentityError(`org "${orgSlug}" has no project "${name}"`)
    this.changed()
    return { id: updated[0]!.id, name, repository: null }
  }

  createProject(orgSlug: string, name: string, repo: string | null, githubInstallation: string | null = null) {
    if (!HANDLE.test(name) || name === '_') throw new IdentityError(`project name must be a handle (letters, digits, . _ -): "${name}"`)
    const org = this.orgBySlug(orgSlug)
    const parsed = repo === null ? null : parseRepo(repo)
    if (repo !== null && !parsed) throw new IdentityError(`repository must be owner/name or a https URL to one: "${repo}"`)
    const exists = this.db
      .select()
      .from(projects)
      .where(and(eq(projects.orgId, org.id), eq(projects.name, name)))
      .get()
    if (exists) throw new IdentityError(`project "${name}" exists in org "${orgSlug}"`)
    const project = {
      id: newId(),
      orgId: org.id,
      name,
      repoOwner: parsed?.owner ?? null,
      repoName: parsed?.name ?? null,
      githubInstallation,
      createdAt: this.now(),
    }
    this.db.insert(projects).values(project).run()
    this.changed()
    return { id: project.id, name }
  }
}

/** `owner/name`, or an https URL whose path is `/owner/name` (a trailing `.git` is dropped). */
export function parseRepo(repo: string): { owner: string; name: string } | null {
  let path = repo
  if (/^https?:\/\//.test(repo)) {
    try {
      path = new URL(repo).pathname.replace(/^\/+|\/+$/g, '').replace(/\.git$/, '')
    } catch {
      return null
    }
  }
  const match = /^([A-Za-z0-9_.-]+)\/([A-Za-z0-9_.-]+)$/.exec(path)
  return match ? { owner: match[1]!, name: match[2]! } : null
}
