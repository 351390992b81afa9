import { Elysia } from 'elysia'
import { ProviderAccount } from '../accounts/model'
import { SavedAgent } from '../agents/model'
import { ApiKey } from '../api-keys/model'
import { Connection } from '../connections/model'
import { ProjectEnvironment, ProjectSecret } from '../environments/model'
import { UploadedFile } from '../files/model'
import { UsageView } from '../plans/model'
import { Project } from '../projects/model'
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
  SavedAgent,
  Project,
  ProviderAccount,
  Connection,
  UploadedFile,
  Usage: UsageView,
  Error: ErrorBody,
})
