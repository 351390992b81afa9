import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { SessionParams } from '../domain/api-schemas'
import type { ChangesService } from './changes'
import { installationView, type InstallationService } from './installations'
import { GithubInstallation, SessionChanges } from './model'

const tags = ['sessions']

/** What a session changed in its repository (spec 4.4), and the org's code host installations (spec 4.1). */
export const repositoryRoutes = (auth: AuthService, changes: ChangesService, installations: InstallationService) =>
  new Elysia({ name: 'agentd/repositories' })
    .use(errorModel)
    .use(orgScope(auth))
    .get('/o/:org/p/:project/sessions/:session/changes', ({ access, params }) => changes.of(access, params.project, params.session), {
      params: SessionParams,
      response: { 200: SessionChanges, ...errorResponses(401, 403, 404) },
      detail: { operationId: 'sessions.changes', tags, summary: 'The files the session’s pull request changed, from the code host' },
    })
    .get(
      '/o/:org/github',
      ({ access }) => ({
        data: installations.list(access.orgId).map(installationView),
      }),
      {
        params: t.Object({ org: t.String() }),
        response: { 200: t.Object({ data: t.Array(GithubInstallation) }), ...errorResponses(401, 403, 404) },
        detail: {
          operationId: 'github.installations',
          tags: ['repositories'],
          summary: 'The GitHub App installations linked to the org: the repositories its runs may reach',
        },
      },
    )
