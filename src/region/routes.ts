import { Elysia, t } from 'elysia'
import { ApiError, authFailed, badRequest } from '../domain/errors'
import { errorResponses } from '../http/errors'
import { parseBody, payloadTooLarge } from '../http/body'
import { BEAT_PATH, CLUSTER_TOKEN_HEADER, FORWARDED_BY_HEADER } from './forward'
import type { RegionService } from './service'

const BEAT_BODY_LIMIT = { bytes: 4096, refuse: payloadTooLarge }

/**
 * The region's own route (contract section 12): a node's heartbeat to the primary, which records
 * where the node answers and its capacity. Only nodes, with AGENTD_CLUSTER_TOKEN, may call it.
 */
export const regionRoutes = (region: RegionService) =>
  new Elysia({ name: 'agentd/region' })
    // A beat is small: read under its own limit, as the other routes read theirs (src/http/body.ts).
    .onParse({ as: 'scoped' }, ({ request }) => parseBody(request, BEAT_BODY_LIMIT))
    // Never runs (the hook above always answers): it names the body's media type for the OpenAPI document.
    .onParse({ as: 'scoped' }, { fn: 'json' } as never)
    .post(
      BEAT_PATH,
      ({ request, body }) => {
        // A node's own beat, sent by it: never one a node forwarded for someone else.
        if (!region.fromNode(request.headers.get(CLUSTER_TOKEN_HEADER)) || request.headers.has(FORWARDED_BY_HEADER))
          throw authFailed('Only a node of this region may send a heartbeat')
        if (region.role() !== 'primary')
          throw new ApiError('unavailable', 'This node is not the primary; send the heartbeat to the primary', 'NOT_PRIMARY')
        if (body.name === region.nodeName) throw badRequest('A heartbeat cannot speak for the primary itself')
        region.recordBeat(body)
        return { ok: true as const }
      },
      {
        body: t.Object(
          {
            name: t.String({ minLength: 1, maxLength: 100 }),
            url: t.String({ pattern: '^https?://[^/]+$', maxLength: 500 }),
            maxSandboxes: t.Integer({ minimum: 0 }),
          },
          { additionalProperties: false },
        ),
        response: { 200: t.Object({ ok: t.Literal(true) }), ...errorResponses(400, 401, 413, 503) },
        detail: {
          operationId: 'regionBeat',
          tags: ['operations'],
          summary: "A node's heartbeat to its region's primary (node-to-node: X-Agentd-Cluster-Token)",
          security: [],
        },
      },
    )
