import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import type { SessionQueries } from './queries'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { decodePathParam } from '../http/path-params'
import { artifactHeaders } from './artifact-headers'
import { sessionModels } from './model'
import { ArtifactFile, SessionParams } from '../domain/api-schemas'

const tags = ['artifacts']

/** The files a session produced (spec 4.4). */
export const artifactRoutes = (auth: AuthService, queries: SessionQueries) =>
  new Elysia({ name: 'agentd/artifacts' })
    .use(errorModel)
    .use(sessionModels)
    .use(orgScope(auth))
    .get(
      '/o/:org/p/:project/sessions/:session/artifacts',
      ({ access, params }) => queries.artifactList(access, params.project, params.session),
      {
        params: SessionParams,
        response: { 200: t.Object({ execution_id: t.String(), artifacts: t.Array(ArtifactFile) }), ...errorResponses(401, 403, 404) },
        detail: { operationId: 'artifacts.list', tags, summary: 'A session’s artifacts in upload order' },
      },
    )
    .get(
      // Artifact names may hold folders (`reports/summary.md`), hence the wildcard.
      '/o/:org/p/:project/sessions/:session/artifacts/*',
      ({ access, params }) => {
        const name = decodePathParam('artifact name', params['*'])
        const { file, contentType } = queries.artifact(access, params.project, params.session, name)
        return new Response(file, { headers: artifactHeaders(name, contentType) })
      },
      {
        params: t.Object({ org: t.String(), project: t.String(), session: t.String(), '*': t.String() }),
        response: {
          200: t.String({ description: 'The file’s bytes, with the Content-Type it was stored with' }),
          ...errorResponses(401, 403, 404),
        },
        detail: { operationId: 'artifacts.download', tags, summary: 'Download one artifact' },
      },
    )
