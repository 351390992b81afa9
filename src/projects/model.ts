import { Elysia, t } from 'elysia'

/** A Project (spec 1: a named unit bound to a code repository and its connectors). */
export const Project = t.Object({
  id: t.String(),
  name: t.String(),
  repository: t.Union([t.String({ description: 'owner/name' }), t.Null()]),
  github_installation: t.Union([
    t.String({ description: 'The installation (`GET /o/{org}/github` id) its runs alone go through' }),
    t.Null(),
  ]),
  created_at: t.String({ format: 'date-time' }),
})

export const CreateProjectBody = t.Object(
  {
    name: t.String({ minLength: 1, maxLength: 100, description: 'The handle: letters, digits, . _ - (not `_`)' }),
    repository: t.Optional(t.String({ maxLength: 300, description: 'owner/name, or an https URL to the repository' })),
    github_installation: t.Optional(
      t.String({
        maxLength: 100,
        description: 'One of the org’s installations (`GET /o/{org}/github`): its runs go through that one alone',
      }),
    ),
  },
  { additionalProperties: false },
)

/** This feature's named models: each one component of the OpenAPI document, referenced by name from its routes. */
export const projectModels = new Elysia({ name: 'agentd/models/projects' }).model({ Project })
