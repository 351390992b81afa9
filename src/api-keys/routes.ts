import { Elysia, t } from 'elysia'
import type { ApiKeyService } from './service'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import {
  ApiKey,
  ApiKeyWithSecret,
  CreateApiKeyBody,
  DeliveriesQuery,
  KeyParams,
  UpdateApiKeyBody,
  WebhookDelivery,
  apiKeyModels,
} from './model'
import { OrgParams } from '../domain/api-schemas'

const tags = ['api-keys']

/** Spec 4.5. Signed-in callers only: an API key gets 401 here (the auth plugin's default). */
export const apiKeyRoutes = (auth: AuthService, keys: ApiKeyService) =>
  new Elysia({ name: 'agentd/api-keys' })
    .use(errorModel)
    .use(apiKeyModels)
    .use(orgScope(auth))
    .get('/o/:org/api-keys', ({ access }) => keys.list(access), {
      params: OrgParams,
      response: { 200: t.Object({ data: t.Array(ApiKey) }), ...errorResponses(401, 403, 404) },
      detail: { operationId: 'apiKeys.list', tags, summary: 'Every live key of the org, without secrets (admins)' },
    })
    .post(
      '/o/:org/api-keys',
      ({ access, principal, body, set }) => {
        const created = keys.create(principal, access, body)
        set.status = 201
        return created
      },
      {
        params: OrgParams,
        body: CreateApiKeyBody,
        response: { 201: ApiKeyWithSecret, ...errorResponses(400, 401, 403, 404, 413) },
        detail: { operationId: 'apiKeys.create', tags, summary: 'Mint a key; its secret is shown only in this answer (admins)' },
      },
    )
    .patch('/o/:org/api-keys/:key', ({ access, principal, params, body }) => keys.update(principal, access, params.key, body), {
      params: KeyParams,
      body: UpdateApiKeyBody,
      response: { 200: 'ApiKey', ...errorResponses(400, 401, 403, 404, 413) },
      detail: {
        operationId: 'apiKeys.update',
        tags,
        summary: 'Set, change or clear the webhook URL, or rotate its secret (the key’s creator)',
      },
    })
    .delete(
      '/o/:org/api-keys/:key',
      ({ access, params, set }) => {
        keys.revoke(access, params.key)
        set.status = 204
      },
      {
        params: KeyParams,
        response: { 204: t.Void(), ...errorResponses(400, 401, 403, 404, 413) },
        detail: { operationId: 'apiKeys.revoke', tags, summary: 'Revoke a key; pending webhook retries are dropped (admins)' },
      },
    )
    .post('/o/:org/api-keys/:key/rotate', ({ access, principal, params }) => keys.rotate(principal, access, params.key), {
      params: KeyParams,
      response: { 200: ApiKeyWithSecret, ...errorResponses(400, 401, 403, 404, 413) },
      detail: { operationId: 'apiKeys.rotate', tags, summary: 'A new secret; the old one stops working at once (the key’s creator)' },
    })
    .get('/o/:org/api-keys/:key/deliveries', ({ access, params, query }) => keys.deliveries(access, params.key, query.limit ?? 50), {
      params: KeyParams,
      query: DeliveriesQuery,
      response: { 200: t.Object({ data: t.Array(WebhookDelivery) }), ...errorResponses(400, 401, 403, 404) },
      detail: {
        operationId: 'apiKeys.deliveries',
        tags,
        summary: 'The key’s runFinished webhook deliveries, newest first, with every attempt (admins; an agentd addition)',
      },
    })
