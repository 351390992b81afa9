import { Elysia } from 'elysia'
import type { AuthService } from '../identity/auth'
import type { SessionLogReader } from './logs'
import type { ToolCallService } from './tool-calls'
import type { TranscriptService } from './service'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { SessionParams } from '../domain/api-schemas'
import {
  MessagesQuery,
  MessagesResponse,
  SessionLogs,
  ToolCallsQuery,
  ToolCallsResponse,
  TrajectoryResponse,
  transcriptModels,
} from './model'

const tags = ['transcript']
const NDJSON = 'application/x-ndjson'

/** Transcript reads of one session (spec 4.3 messages and tool-calls, 4.4 trajectory) and its runtime log (4.2). */
export const transcriptRoutes = (auth: AuthService, transcripts: TranscriptService, toolCalls: ToolCallService, logs: SessionLogReader) => {
  return new Elysia({ name: 'agentd/transcript' })
    .use(errorModel)
    .use(transcriptModels)
    .use(orgScope(auth))
    .get('/o/:org/p/:project/sessions/:session/logs', ({ access, params }) => logs.logs(access, params.project, params.session), {
      params: SessionParams,
      response: { 200: SessionLogs, ...errorResponses(401, 403, 404) },
      // Listed with the session's other reads, where the spec puts it.
      detail: { operationId: 'sessions.logs', tags: ['sessions'], summary: 'The runtime log of a session' },
    })
    .get(
      '/o/:org/p/:project/sessions/:session/messages',
      ({ access, params, query }) => transcripts.messages(access, params.project, params.session, query),
      {
        params: SessionParams,
        query: MessagesQuery,
        response: { 200: MessagesResponse, ...errorResponses(400, 401, 403, 404) },
        detail: {
          operationId: 'sessions.messages',
          tags,
          summary: 'The captured transcript as normalized events, filtered by turns and roles',
        },
      },
    )
    .get(
      '/o/:org/p/:project/sessions/:session/trajectory',
      ({ access, params, headers }) => {
        if (!(headers.accept ?? '').includes(NDJSON)) return transcripts.trajectory(access, params.project, params.session)
        const raw = transcripts.trajectoryRaw(access, params.project, params.session)
        return new Response(raw.body, { headers: { 'content-type': NDJSON, 'x-session-format': raw.format } })
      },
      {
        params: SessionParams,
        response: { 200: TrajectoryResponse, ...errorResponses(401, 403, 404) },
        detail: {
          operationId: 'sessions.trajectory',
          tags,
          summary: 'Where the raw transcript is; with Accept: application/x-ndjson, its bytes (format in X-Session-Format)',
        },
      },
    )
    .get(
      '/o/:org/p/:project/sessions/:session/tool-calls',
      ({ access, params, query }) => toolCalls.list(access, params.project, params.session, query),
      {
        params: SessionParams,
        query: ToolCallsQuery,
        response: { 200: ToolCallsResponse, ...errorResponses(400, 401, 403, 404) },
        detail: { operationId: 'sessions.toolCalls', tags, summary: 'Tool calls indexed from the transcript, in call order' },
      },
    )
}
