import { and, desc, eq } from 'drizzle-orm'
import type { Catalog } from '../catalog/catalog'
import type { Db } from '../db/client'
import { providerAccounts, type AccountProvider } from '../db/schema'
import { ApiError, badRequest, notFound } from '../domain/errors'
import { newId } from '../domain/ids'
import { iso } from '../domain/values'
import type { ProviderConfig, Providers } from '../gateway/protocol'
import type { OrgAccess, Principal } from '../identity/service'
import type { CreateAccountBody, ProviderAccount } from './model'
import type { KeySealer } from './seal'

/** Where an account's calls go when the operator configured no base URL for its provider. */
const PUBLIC_BASE_URLS: Record<AccountProvider, string> = {
  anthropic: 'https://api.anthropic.com',
  openai: 'https://api.openai.com/v1',
}

type Row = typeof providerAccounts.$inferSelect

/**
 * Users' own provider API keys (spec 4.1 `account_id`). Each user sees and uses only their own, in
 * the org they stored it in; a key run uses its creator's. Runs on an account reach that provider
 * with the account's key (at the operator's base URL for it, if any) and are not metered on the
 * org's plan.
 */
export class AccountService {
  constructor(private readonly deps: { db: Db; sealer: KeySealer | null; catalog: Catalog; providers: Providers; now: () => number }) {}

  async create(principal: Principal, access: OrgAccess, body: CreateAccountBody): Promise<ProviderAccount> {
    if (!this.deps.sealer)
      throw new ApiError(
        'unprocessable',
        'This server cannot store provider keys: its operator has not set accounts.encryption_key in the config file',
        'ACCOUNTS_NOT_CONFIGURED',
      )
    const id = `acct_${newId()}`
    const row: Row = {
      id,
      orgId: access.orgId,
      userId: this.owner(principal),
      provider: body.provider,
      name: body.name ?? body.provider,
      keyHint: body.api_key.slice(-4),
      sealedKey: await this.deps.sealer.seal(id, body.api_key),
      createdAt: this.deps.now(),
    }
    this.deps.db.insert(providerAccounts).values(row).run()
    return view(row)
  }

  list(principal: Principal, access: OrgAccess): { data: ProviderAccount[] } {
    const rows = this.deps.db
      .select()
      .from(providerAccounts)
      .where(and(eq(providerAccounts.orgId, access.orgId), eq(providerAccounts.userId, this.owner(principal))))
      .orderBy(desc(providerAccounts.createdAt))
      .all()
    return { data: rows.map(view) }
  }

  remove(principal: Principal, access: OrgAccess, id: string): void {
    this.own(principal, access.orgId, id)
    this.deps.db.delete(providerAccounts).where(eq(providerAccounts.id, id)).run()
  }

  /**
   * At create: `accountId` is the caller's own (a key run: its creator's) and its provider serves
   * `modelId`; 404 for anyone else's or an unknown id, 400 for a model of another provider.
   */
  assertUsable(principal: Principal, orgId: string, accountId: string, modelId: string): void {
    const row = this.own(principal, orgId, accountId)
    const model = this.deps.catalog.models.find((m) => m.id === modelId)
    if (model?.provider !== row.provider) {
      throw badRequest(`account ${accountId} holds a key for ${row.provider}, and model ${modelId} is not served by ${row.provider}`)
    }
  }

  /**
   * At each turn: where the account's calls go and with which key; null once it was removed or its key
   * cannot be opened (the gateway then refuses every call).
   */
  async providerFor(accountId: string): Promise<{ name: AccountProvider; config: ProviderConfig } | null> {
    const row = this.deps.db.select().from(providerAccounts).where(eq(providerAccounts.id, accountId)).get()
    if (!row || !this.deps.sealer) return null
    // A key sealed under another encryption key (the operator rotated it) does not open: as removed.
    const apiKey = await this.deps.sealer.open(row.id, row.sealedKey).catch(() => null)
    if (apiKey === null) return null
    return { name: row.provider, config: { baseUrl: this.deps.providers[row.provider]?.baseUrl ?? PUBLIC_BASE_URLS[row.provider], apiKey } }
  }

  private own(principal: Principal, orgId: string, id: string): Row {
    const row = this.deps.db.select().from(providerAccounts).where(eq(providerAccounts.id, id)).get()
    if (!row || row.orgId !== orgId || row.userId !== principal.userId) throw notFound('Account not found')
    return row
  }

  private owner(principal: Principal): string {
    if (!principal.userId) throw new ApiError('forbidden', 'Provider accounts belong to users; this caller is none')
    return principal.userId
  }
}

function view(row: Row): ProviderAccount {
  return { id: row.id, provider: row.provider, name: row.name, key_hint: row.keyHint, created_at: iso(row.createdAt)! }
}
