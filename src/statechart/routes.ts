import { Elysia } from 'elysia'
import type { AuthService } from '../identity/auth'
import type { StatechartService } from './service'
import { authPlugin } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { HtmlPage, StatechartQuery } from './model'

const tags = ['lifecycle']

/** The session lifecycle chart in the browser (signed-in callers only; API keys get 401). */
export const statechartRoutes = (auth: AuthService, charts: StatechartService) => {
  return new Elysia({ name: 'agentd/statechart' })
    .use(errorModel)
    .use(authPlugin(auth))
    .get(
      '/statechart',
      ({ principal, query }) =>
        new Response(charts.page(principal, query.session), { headers: { 'content-type': 'text/html; charset=utf-8' } }),
      {
        query: StatechartQuery,
        response: { 200: HtmlPage, ...errorResponses(400, 401, 404) },
        detail: {
          operationId: 'statechart.page',
          tags,
          summary: 'The session lifecycle as a state chart; with ?session=<id> that session’s state and history',
        },
      },
    )
}
