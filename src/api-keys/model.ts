import { Type } from '@sinclair/typebox'
import { Elysia, t, type Static } from 'elysia'
import { literals, nullable } from '../domain/schema-util'
import { API_KEY_SCOPES } from '../domain/api-keys'
import { MAX_WEBHOOK_URL_LENGTH } from '../webhooks/service'

const DateTime = t.String({ format: 'date-time' })

export const ApiKeyScope = literals(API_KEY_SCOPES)

/** ApiKey (spec 2.10). */
export const ApiKey = t.Object({
  id: t.String({ description: 'Form key_<id>' }),
  name: t.String(),
  prefix: t.String({ description: 'Leading characters of the secret, which begins with sk_live_' }),
  scopes: t.Array(ApiKeyScope),
  max_concurrent: t.Integer(),
  webhook_url: nullable(t.String()),
  expires_at: nullable(DateTime),
  created_by: t.Object({ id: t.String(), email: nullable(t.String()) }),
  last_used_at: nullable(DateTime),
  created_at: DateTime,
  webhook_secret: t.Optional(t.String({ description: 'Present only when a secret was just minted; form whsec_<base64>' })),
})

export const ApiKeyWithSecret = t.Composite([ApiKey, t.Object({ secret: t.String({ description: 'The full key; shown only now' }) })])

export const CreateApiKeyBody = t.Object(
  {
    name: t.String({ minLength: 1, maxLength: 100 }),
    scopes: t.Optional(t.Array(ApiKeyScope, { minItems: 1, uniqueItems: true })),
    // TypeBox's own Integer: Elysia's t.Integer also takes "4", which a JSON body must not.
    max_concurrent: t.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
    expires_at: t.Optional(nullable(DateTime)),
  },
  { additionalProperties: false },
)

export const UpdateApiKeyBody = t.Object(
  {
    webhook_url: t.Optional(nullable(t.String({ format: 'uri', maxLength: MAX_WEBHOOK_URL_LENGTH }))),
    rotate_secret: t.Optional(t.Boolean()),
  },
  { additionalProperties: false },
)

const Attempt = t.Object({
  attempt: t.Integer(),
  attempted_at: DateTime,
  url: t.String(),
  status_code: nullable(t.Integer()),
  latency_ms: t.Integer(),
  error: nullable(t.String()),
})

/** One `runFinished` event of a key and every attempt to deliver it (our addition). */
export const WebhookDelivery = t.Object({
  id: t.String({ description: 'The webhook-id header: webhook:{run_id}:{completed_at ms}' }),
  run_id: t.String(),
  type: t.String(),
  state: literals(['pending', 'delivered', 'failed', 'dropped'] as const),
  reason: nullable(t.String()),
  attempts: t.Array(Attempt),
  next_attempt_at: nullable(DateTime),
  created_at: DateTime,
  finished_at: nullable(DateTime),
})

export const KeyParams = t.Object({ org: t.String(), key: t.String() })
export const DeliveriesQuery = t.Object({ limit: t.Optional(t.Integer({ minimum: 1, maximum: 100 })) })

export type CreateApiKeyBody = Static<typeof CreateApiKeyBody>

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const apiKeyModels = new Elysia({ name: 'agentd/models/api-keys' }).model({ ApiKey })
