import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { accountModels, AccountParams, CreateAccountBody, ProviderAccount } from './model'
import { modelRef } from '../domain/schema-util'
import { OrgParams } from '../domain/api-schemas'
import type { AccountService } from './service'

const tags = ['accounts']

/** A user's own provider API keys (spec 4.1 `account_id`). Signed-in callers only: an API key gets 401. */
export const accountRoutes = (auth: AuthService, accounts: AccountService) =>
  new Elysia({ name: 'agentd/accounts' })
    .use(errorModel)
    .use(accountModels)
    .use(orgScope(auth))
    .get('/o/:org/accounts', ({ access, principal }) => accounts.list(principal, access), {
      params: OrgParams,
      response: { 200: t.Object({ data: t.Array(modelRef('ProviderAccount', ProviderAccount)) }), ...errorResponses(401, 403, 404) },
      detail: {
        operationId: 'accounts.list',
        tags,
        summary: "The caller's own provider accounts in this org, newest first (never their keys)",
      },
    })
    .post(
      '/o/:org/accounts',
      async ({ access, principal, body, set }) => {
        const created = await accounts.create(principal, access, body)
        set.status = 201
        return created
      },
      {
        params: OrgParams,
        body: CreateAccountBody,
        response: { 201: 'ProviderAccount', ...errorResponses(400, 401, 403, 404, 413, 422) },
        detail: {
          operationId: 'accounts.create',
          tags,
          summary: 'Store a provider API key (sealed at rest, never returned); runs name it as account_id',
        },
      },
    )
    .delete(
      '/o/:org/accounts/:account',
      ({ access, principal, params, set }) => {
        accounts.remove(principal, access, params.account)
        set.status = 204
      },
      {
        params: AccountParams,
        response: { 204: t.Void(), ...errorResponses(400, 401, 403, 404, 413) },
        detail: {
          operationId: 'accounts.remove',
          tags,
          summary: "Remove one of the caller's provider accounts; runs on it can take no further turn",
        },
      },
    )
