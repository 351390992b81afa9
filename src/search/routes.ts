import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import type { SessionSearch } from './service'
import { orgScope } from '../http/auth'
import { messageEnvelope, messageErrorResponses, errorModel } from '../http/errors'
import { AmbiguousSelector, SearchQuery, Session, SessionList, searchModels } from './model'
import { OrgParams } from '../domain/api-schemas'

/** `GET /o/{org}/sessions` (spec 4.1): the org-wide search. Its errors use `{code, message}`. */
export const searchRoutes = (auth: AuthService, search: SessionSearch) =>
  new Elysia({ name: 'agentd/search' })
    .use(errorModel)
    .use(searchModels)
    .use(messageEnvelope())
    .use(orgScope(auth))
    .get('/o/:org/sessions', ({ access, query }) => search.search(access, query), {
      params: OrgParams,
      query: SearchQuery,
      response: { 200: t.Union([SessionList, Session]), ...messageErrorResponses(400, 401, 404), 409: AmbiguousSelector },
      detail: {
        operationId: 'sessions.search',
        tags: ['sessions'],
        summary: 'Search the org’s sessions, or resolve one by selector',
        description:
          'Without `selector`: a SessionList, newest first unless `sort` says otherwise, or only `count` with `count=true`. ' +
          'With `selector`: the one Session it names (full id, unique id prefix, or title); 409 AMBIGUOUS_SELECTOR ' +
          'with `candidates` when several match.',
      },
    })
