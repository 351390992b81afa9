import { Elysia } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses } from '../http/errors'
import { models } from '../http/models'
import { SessionParams } from '../sessions/model'
import type { ChangesService } from './changes'
import { SessionChanges } from './model'

const tags = ['sessions']

/** What a session changed in its repository (spec 4.4). */
export const repositoryRoutes = (auth: AuthService, changes: ChangesService) =>
  new Elysia({ name: 'agentd/repositories' }).use(models)
    .use(orgScope(auth, { apiKeys: true }))
    .get('/o/:org/p/:project/sessions/:session/changes', ({ access, params }) => changes.of(access, params.project, params.session), {
      params: SessionParams,
      response: { 200: SessionChanges, ...errorResponses(401, 403, 404) },
      detail: { operationId: 'sessions.changes', tags, summary: 'The files the session’s pull request changed, from the code host' },
    })
