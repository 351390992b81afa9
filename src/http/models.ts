import { Elysia } from 'elysia'
import { ApiKey } from '../api-keys/model'
import { ProjectEnvironment, ProjectSecret } from '../environments/model'
import { Session } from '../search/model'
import { CloudRunSession } from '../sessions/model'
import { SessionEventSchema, ToolCallSchema } from '../transcript/model'
import { ErrorBody } from './errors'

/**
 * The named models of the API: each is one component of the OpenAPI document, referenced by name
 * from the routes (`response: { 200: 'CloudRunSession' }`), so generated clients get one type per
 * resource instead of an anonymous copy at each use.
 */
export const models = new Elysia({ name: 'agentd/models' }).model({
  CloudRunSession,
  Session,
  ApiKey,
  SessionEvent: SessionEventSchema,
  ToolCall: ToolCallSchema,
  ProjectEnvironment,
  ProjectSecret,
  Error: ErrorBody,
})
