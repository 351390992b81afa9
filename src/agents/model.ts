import { Elysia, t, type Static } from 'elysia'
import { literals, nullable } from '../domain/schema-util'
import { EFFORTS, SPEEDS } from '../domain/harness'
import { HarnessSchema } from '../domain/api-schemas'

const DateTime = t.String({ format: 'date-time' })

/** What a saved agent runs with; every field but `harness` may be null (the harness's default). */
const configFields = {
  harness: HarnessSchema,
  model: nullable(t.String({ minLength: 1, maxLength: 200 })),
  effort: nullable(literals(EFFORTS)),
  speed: nullable(literals(SPEEDS)),
  instructions: nullable(t.String({ maxLength: 65536, description: 'Put before the first prompt of every run of this agent.' })),
  skills: t.Array(t.String({ maxLength: 2048 }), {
    maxItems: 20,
    description: 'Skill URLs (spec 4.1 `skills`), fetched and pinned when a run starts.',
  }),
  connections: t.Array(t.String({ minLength: 1, maxLength: 200 }), {
    maxItems: 20,
    description: "Ids or names of the running caller's connections, resolved when each run starts.",
  }),
}

export const AgentConfig = t.Object(configFields)

/** A saved agent and its current revision (agentd's own resource, for shape B `agent_id`). */
export const SavedAgent = t.Object({
  id: t.String({ description: 'Form agent_<id>' }),
  name: t.String(),
  revision: t.Integer({ minimum: 1 }),
  digest: t.String({ description: 'SHA-256 of the revision’s configuration; a run reports it as profile_digest.' }),
  catalog_revision: t.String({ description: 'The catalog this revision was reviewed against.' }),
  catalog_current: t.Boolean({
    description: 'false when the catalog changed since review: runs are 409 CATALOG_REFRESH_REQUIRED until a PATCH with review: true.',
  }),
  ...configFields,
  created_at: DateTime,
  updated_at: DateTime,
})

export const AgentRevision = t.Object({
  revision: t.Integer({ minimum: 1 }),
  digest: t.String(),
  catalog_revision: t.String(),
  config: AgentConfig,
  created_at: DateTime,
})

/** Every configuration field but the harness, as a create or a change may send it. */
const optionalSettings = {
  model: t.Optional(configFields.model),
  effort: t.Optional(configFields.effort),
  speed: t.Optional(configFields.speed),
  instructions: t.Optional(configFields.instructions),
  skills: t.Optional(configFields.skills),
  connections: t.Optional(configFields.connections),
}

export const CreateAgentBody = t.Object(
  { name: t.String({ minLength: 1, maxLength: 100 }), harness: HarnessSchema, ...optionalSettings },
  { additionalProperties: false },
)

/** A change of name or configuration; `review: true` reviews the configuration again against today's catalog. */
export const PatchAgentBody = t.Object(
  {
    name: t.Optional(t.String({ minLength: 1, maxLength: 100 })),
    harness: t.Optional(HarnessSchema),
    ...optionalSettings,
    review: t.Optional(t.Literal(true)),
  },
  { additionalProperties: false },
)

export const AgentParams = t.Object({ org: t.String(), agent: t.String() })

export type CreateAgentBody = Static<typeof CreateAgentBody>
export type PatchAgentBody = Static<typeof PatchAgentBody>

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const agentModels = new Elysia({ name: 'agentd/models/agents' }).model({ SavedAgent })
