import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import type { SessionQueries } from './queries'
import type { SessionService } from './service'
import { orgScope } from '../http/auth'
import { errorModel, errorResponses } from '../http/errors'
import {
  sessionModels,
  CloudRunSession,
  CreateSessionBody,
  IdempotencyHeaders,
  OperationAccepted,
  PatchSessionBody,
  PatchSessionResponse,
  ProjectListQuery,
  ProjectParams,
  SessionResult,
} from './model'
import { SessionParams } from '../domain/api-schemas'

const tags = ['sessions']

export const sessionRoutes = (auth: AuthService, sessions: SessionService, queries: SessionQueries) =>
  new Elysia({ name: 'agentd/sessions' })
    .use(errorModel)
    .use(sessionModels)
    .use(orgScope(auth))
    .post(
      '/o/:org/p/:project/sessions',
      async ({ access, principal, params, headers, body, set }) => {
        const session = await sessions.create(principal, access, params.project, body, headers['idempotency-key'] ?? null)
        set.status = 202
        return session
      },
      {
        params: ProjectParams,
        headers: IdempotencyHeaders,
        body: CreateSessionBody,
        response: { 202: 'CloudRunSession', ...errorResponses(400, 401, 402, 403, 404, 409, 413, 422, 429) },
        detail: {
          operationId: 'sessions.create',
          tags,
          summary: 'Start a session: shape A (prompt) or shape B (input blocks, contract section 8)',
        },
      },
    )
    .get('/o/:org/p/:project/sessions', ({ access, params, query }) => queries.list(access, params.project, query), {
      params: ProjectParams,
      query: ProjectListQuery,
      response: { 200: t.Object({ executions: t.Array(CloudRunSession) }), ...errorResponses(400, 401, 403, 404) },
      detail: { operationId: 'sessions.listInProject', tags, summary: 'List sessions in one Project, newest first' },
    })
    .get('/o/:org/p/:project/sessions/:session', ({ access, params }) => queries.get(access, params.project, params.session), {
      params: SessionParams,
      response: { 200: 'CloudRunSession', ...errorResponses(401, 403, 404) },
      detail: { operationId: 'sessions.get', tags, summary: 'Get one session' },
    })
    .patch(
      '/o/:org/p/:project/sessions/:session',
      async ({ access, principal, params, body, set }) => {
        const answer = await sessions.update(access, principal, params.project, params.session, body.status)
        switch (answer.kind) {
          case 'cancelled':
            return { ok: true as const, status: 'cancelled' as const }
          case 'turn_stopped':
            return { ok: true as const, status: 'stop_turn_confirmed' as const }
          case 'accepted':
            set.status = 202
            return { operation_id: answer.operationId }
        }
      },
      {
        params: SessionParams,
        body: PatchSessionBody,
        response: { 200: PatchSessionResponse, 202: OperationAccepted, ...errorResponses(400, 401, 403, 404, 409, 413, 422) },
        detail: { operationId: 'sessions.update', tags, summary: 'Cancel, pause, resume or interrupt a session' },
      },
    )
    .post(
      '/o/:org/p/:project/sessions/:session/fork',
      async ({ access, principal, params, headers, set }) => {
        const fork = await sessions.fork(access, principal, params.project, params.session, headers['idempotency-key'] ?? null)
        set.status = 202
        return fork
      },
      {
        params: SessionParams,
        headers: IdempotencyHeaders,
        response: { 202: 'CloudRunSession', ...errorResponses(400, 401, 402, 403, 404, 409, 413, 503) },
        detail: {
          operationId: 'sessions.fork',
          tags,
          summary: 'Fork a resumable session parked between turns: a new session whose sandbox is a copy of its own (agentd’s own route)',
        },
      },
    )
    .get('/o/:org/p/:project/sessions/:session/result', ({ access, params }) => queries.result(access, params.project, params.session), {
      params: SessionParams,
      response: { 200: SessionResult, ...errorResponses(401, 403, 404) },
      detail: { operationId: 'sessions.result', tags, summary: 'The run’s status line and last answer' },
    })
