import { index, sqliteTable, text } from 'drizzle-orm/sqlite-core'
import { createdAt, ownedBy } from './columns'
import { orgs, users } from './identity'

export const ACCOUNT_PROVIDERS = ['anthropic', 'openai'] as const
export type AccountProvider = (typeof ACCOUNT_PROVIDERS)[number]

/**
 * A user's own provider API key (spec 4.1 `account_id`): runs on it go to that provider with this
 * key and are not metered on the org's plan. The key is kept sealed (JWE, A256GCM, under the
 * operator's `accounts.encryption_key`) and never returned; `key_hint` is its last characters.
 */
export const providerAccounts = sqliteTable(
  'provider_accounts',
  {
    id: text('id').primaryKey(),
    orgId: ownedBy('org_id', () => orgs.id),
    userId: ownedBy('user_id', () => users.id),
    provider: text('provider', { enum: ACCOUNT_PROVIDERS }).notNull(),
    name: text('name').notNull(),
    keyHint: text('key_hint').notNull(),
    sealedKey: text('sealed_key').notNull(),
    createdAt: createdAt(),
  },
  (table) => [index('provider_accounts_owner_idx').on(table.orgId, table.userId)],
)
