import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { environmentModels, EnvironmentModel } from './model'
import type { EnvironmentService } from './environment'
import type { SecretService } from './secrets'

const tags = ['environments']

/**
 * A Project's secrets and environment (contract section 10): org admins only (a member is 403),
 * signed-in callers only (an API key is 401 AUTH_FAILED); an unknown Project is 404.
 */
export const environmentRoutes = (auth: AuthService, environments: EnvironmentService, secrets: SecretService) =>
  new Elysia({ name: 'agentd/environments' })
    .use(errorModel)
    .use(environmentModels)
    .use(orgScope(auth))
    .get(
      '/o/:org/projects/:project/secrets',
      ({ access, params }) => ({ data: secrets.list(environments.adminProject(access, params.project)) }),
      {
        params: EnvironmentModel.projectParams,
        response: { 200: EnvironmentModel.secretList, ...errorResponses(401, 403, 404) },
        detail: { operationId: 'secrets.list', tags, summary: 'The Project’s secrets by name (never their values; admins)' },
      },
    )
    .put(
      '/o/:org/projects/:project/secrets/:name',
      async ({ access, params, body, set }) => {
        await secrets.set(environments.adminProject(access, params.project), params.name, body.value)
        set.status = 204
      },
      {
        params: EnvironmentModel.secretParams,
        body: EnvironmentModel.putSecret,
        response: { 204: t.Void(), ...errorResponses(400, 401, 403, 404, 413, 422) },
        detail: {
          operationId: 'secrets.put',
          tags,
          summary:
            'Make or replace a Project secret (admins): sealed at rest, an environment variable of its name in ' +
            'the Project’s sandboxes from the next turn on',
        },
      },
    )
    .delete(
      '/o/:org/projects/:project/secrets/:name',
      ({ access, params, set }) => {
        secrets.removeOrFail(environments.adminProject(access, params.project), params.name)
        set.status = 204
      },
      {
        params: EnvironmentModel.secretParams,
        response: { 204: t.Void(), ...errorResponses(401, 403, 404, 413) },
        detail: { operationId: 'secrets.remove', tags, summary: 'Remove a Project secret (admins)' },
      },
    )
    .get(
      '/o/:org/projects/:project/environment',
      ({ access, params }) => environments.get(environments.adminProject(access, params.project)),
      {
        params: EnvironmentModel.projectParams,
        response: { 200: 'ProjectEnvironment', ...errorResponses(401, 403, 404) },
        detail: {
          operationId: 'environments.get',
          tags,
          summary: 'The Project’s environment: setup script, its time limit, the hosts its sandboxes may reach (admins)',
        },
      },
    )
    .put(
      '/o/:org/projects/:project/environment',
      ({ access, params, body }) => environments.put(environments.adminProject(access, params.project), body),
      {
        params: EnvironmentModel.projectParams,
        body: EnvironmentModel.putEnvironment,
        response: { 200: 'ProjectEnvironment', ...errorResponses(400, 401, 403, 404, 413) },
        detail: {
          operationId: 'environments.put',
          tags,
          summary: 'Replace the Project’s environment whole (absent fields take their defaults); its revision grows by 1 (admins)',
        },
      },
    )
