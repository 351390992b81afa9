import { Elysia, t } from 'elysia'
import { badRequest } from '../domain/errors'
import type { AuthService } from '../identity/auth'
import type { SessionQueries } from './queries'
import type { SessionService } from './service'
import { orgScope, stillAllowed } from '../http/auth'
import { sseStream } from './sse'
import { errorResponses, errorModel } from '../http/errors'
import { EventsQuery, MessageQueued, MessageSent, PostMessageBody, sessionModels } from './model'
import { SessionParams } from '../domain/api-schemas'

const tags = ['sessions']

/** How often an open event stream asks again whether its credential still grants it. */
const CREDENTIAL_RECHECK_MS = 1_000

/** Following and steering a run: the event stream, follow-up messages, the runtime log. */
export const liveRoutes = (auth: AuthService, sessions: SessionService, queries: SessionQueries, keepaliveMs = 15_000) =>
  new Elysia({ name: 'agentd/sessions-live' })
    .use(errorModel)
    .use(sessionModels)
    .use(orgScope(auth))
    .get(
      '/o/:org/p/:project/sessions/:session/events',
      ({ access, params, query, headers, request }) => {
        const cursor = headers['last-event-id'] ?? query.cursor ?? '0'
        if (!/^\d+$/.test(cursor)) throw badRequest(`not an event id: "${cursor}"`)
        const recheck = {
          everyMs: CREDENTIAL_RECHECK_MS,
          allowed: stillAllowed(auth, request.headers.get('authorization') ?? undefined, params.org),
        }
        const stream = queries.eventStream(access, params.project, params.session, Number(cursor), keepaliveMs, recheck)
        // Nothing after the cursor of a session at rest: where it ended, as JSON. A 200 that is not
        // text/event-stream makes an EventSource stop for good (it reconnects after any stream ends).
        if ('rested' in stream) return Response.json(stream.rested)
        return new Response(sseStream(stream.follow), {
          headers: {
            'content-type': 'text/event-stream; charset=utf-8',
            'cache-control': 'no-cache',
            // Proxies must pass events through as they come.
            'x-accel-buffering': 'no',
          },
        })
      },
      {
        params: SessionParams,
        query: EventsQuery,
        headers: t.Object({ 'last-event-id': t.Optional(t.String()) }),
        response: {
          200: t.String({
            description:
              'text/event-stream: `status`, unnamed harness events, then `done` or `error`. A resumed stream (Last-Event-ID ' +
              'or cursor) of a session at rest with no event after it is application/json instead, `{status, output, result}` as ' +
              'its `done` said: an EventSource stops reconnecting on it',
          }),
          ...errorResponses(400, 401, 403, 404),
        },
        detail: { operationId: 'sessions.events', tags, summary: 'Follow a session live (server-sent events)' },
      },
    )
    .post(
      '/o/:org/p/:project/sessions/:session/messages',
      ({ access, principal, params, body, set }) => {
        const answer = sessions.message(access, principal, params.project, params.session, body.content)
        if (answer.kind === 'delivered') return { ok: true as const, status: 'message_sent' as const }
        set.status = 202
        return { ok: true as const, status: 'queued' as const, message_id: answer.messageId, position: answer.position }
      },
      {
        params: SessionParams,
        body: PostMessageBody,
        response: { 200: MessageSent, 202: MessageQueued, ...errorResponses(400, 401, 402, 403, 404, 409, 413, 429) },
        detail: { operationId: 'sessions.sendMessage', tags, summary: 'Send a follow-up message' },
      },
    )
