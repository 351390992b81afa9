import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import { agentsAvailable } from './discovery'
import type { Catalog } from './catalog'
import type { HarnessVersions } from './catalog'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { HarnessSchema } from '../domain/api-schemas'

export const agentRoutes = (auth: AuthService, catalog: Catalog, runnable: HarnessVersions, now: () => number) =>
  new Elysia({ name: 'agentd/agents' })
    .use(errorModel)
    .use(orgScope(auth))
    .get(
      '/o/:org/agents/available',
      // orgScope has checked the caller's standing in the org; the catalog is the same for every org.
      ({ query }) => agentsAvailable(catalog, runnable, new Date(now()), query.harness),
      {
        params: t.Object({ org: t.String() }),
        query: t.Object({ harness: t.Optional(HarnessSchema) }),
        response: { 200: t.Record(t.String(), t.Unknown()), ...errorResponses(400, 401, 404) },
        detail: {
          operationId: 'agents.available',
          tags: ['discovery'],
          summary: 'Harnesses, models, connectors and plugins the org can run',
        },
      },
    )
