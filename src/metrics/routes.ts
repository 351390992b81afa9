import { timingSafeEqual } from 'node:crypto'
import { Elysia, t } from 'elysia'
import { authFailed, notFound } from '../domain/errors'
import { errorResponses } from '../http/errors'
import type { Metrics } from './metrics'

/** Whether `header` is `Bearer <token>`, compared in constant time. */
function bearerIs(header: string | null, token: string): boolean {
  const given = Buffer.from(header?.replace(/^Bearer\s+/i, '') ?? '')
  const wanted = Buffer.from(token)
  return given.length === wanted.length && timingSafeEqual(given, wanted)
}

/**
 * GET /metrics, Prometheus text (issue 19): served only when the operator sets AGENTD_METRICS_TOKEN,
 * and only to a scraper that sends it as a bearer token. Not an org route: it counts every org.
 */
export const metricsRoutes = (metrics: Metrics, token: string | null) =>
  new Elysia({ name: 'agentd/metrics' }).get(
    '/metrics',
    async ({ request }) => {
      if (token === null) throw notFound('Metrics are off: the operator has not set AGENTD_METRICS_TOKEN')
      if (!bearerIs(request.headers.get('authorization'), token)) throw authFailed('The metrics token is missing or wrong')
      return new Response(await metrics.text(), { headers: { 'content-type': metrics.contentType } })
    },
    {
      response: { 200: t.String({ description: 'Prometheus text exposition format 0.0.4' }), ...errorResponses(401, 404) },
      detail: {
        operationId: 'metrics',
        tags: ['operations'],
        summary: 'Prometheus metrics of the whole server (bearer: AGENTD_METRICS_TOKEN)',
        security: [{ metricsToken: [] }],
      },
    },
  )
