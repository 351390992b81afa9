import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { projectModels, CreateProjectBody, Project } from './model'
import { modelRef } from '../domain/schema-util'
import type { ProjectService } from './service'

const tags = ['projects']
const OrgParams = t.Object({ org: t.String() })

/** The org's Projects: what `{project}` in a session path names. */
export const projectRoutes = (auth: AuthService, service: ProjectService) =>
  new Elysia({ name: 'agentd/projects' })
    .use(errorModel)
    .use(projectModels)
    .use(orgScope(auth))
    .get('/o/:org/projects', ({ access }) => service.list(access), {
      params: OrgParams,
      response: { 200: t.Object({ data: t.Array(modelRef('Project', Project)) }), ...errorResponses(401, 403, 404) },
      detail: { operationId: 'projects.list', tags, summary: 'The org’s Projects, by name' },
    })
    .post(
      '/o/:org/projects',
      ({ access, body, set }) => {
        const made = service.create(access, body)
        set.status = 201
        return made
      },
      {
        params: OrgParams,
        body: CreateProjectBody,
        response: { 201: 'Project', ...errorResponses(400, 401, 403, 404, 409, 413, 422) },
        detail: {
          operationId: 'projects.create',
          tags,
          summary: 'A Project bound to a repository, and optionally to one of the org’s installations (admins)',
        },
      },
    )
