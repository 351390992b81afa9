import { Elysia, t, type Static } from 'elysia'
import { ACCOUNT_PROVIDERS } from '../db/schema/accounts'
import { literals } from '../domain/schema-util'

/** A provider account as its owner sees it: never the key, only its last characters. */
export const ProviderAccount = t.Object({
  id: t.String({ description: 'Form acct_<id>' }),
  provider: literals(ACCOUNT_PROVIDERS),
  name: t.String(),
  key_hint: t.String({ description: 'The last four characters of the key' }),
  created_at: t.String({ format: 'date-time' }),
})
export type ProviderAccount = Static<typeof ProviderAccount>

export const CreateAccountBody = t.Object(
  {
    provider: literals(ACCOUNT_PROVIDERS),
    api_key: t.String({
      minLength: 8,
      maxLength: 512,
      pattern: '^[\\x21-\\x7e]+$',
      description: "The provider's API key; stored sealed, never returned",
    }),
    name: t.Optional(t.String({ minLength: 1, maxLength: 100 })),
  },
  { additionalProperties: false },
)
export type CreateAccountBody = Static<typeof CreateAccountBody>

export const AccountParams = t.Object({ org: t.String(), account: t.String() })

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const accountModels = new Elysia({ name: 'agentd/models/accounts' }).model({ ProviderAccount })
