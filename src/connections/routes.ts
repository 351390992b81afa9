import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import {
  connectionModels,
  Connection,
  ConnectionParams,
  ConnectionSignIn,
  CreateConnectionBody,
  SignInCallbackBody,
  ProjectConnector,
  ProjectConnectorParams,
  ProjectParams,
} from './model'
import { modelRef } from '../domain/schema-util'
import { OrgParams } from '../domain/api-schemas'
import type { ConnectionService } from './service'
import type { ConnectorService } from './connectors'

const tags = ['connections']

/** A user's own tool servers (spec 4.1 connections). Signed-in callers only: a key run may not send connections. */
export const connectionRoutes = (auth: AuthService, connections: ConnectionService, connectors: ConnectorService) =>
  new Elysia({ name: 'agentd/connections' })
    .use(errorModel)
    .use(connectionModels)
    .use(orgScope(auth))
    .get('/o/:org/connections', ({ access, principal }) => connections.list(principal, access), {
      params: OrgParams,
      response: { 200: t.Object({ data: t.Array(modelRef('Connection', Connection)) }), ...errorResponses(401, 403, 404) },
      detail: { operationId: 'connections.list', tags, summary: "The caller's own tool servers in this org (never their tokens)" },
    })
    .post(
      '/o/:org/connections',
      async ({ access, principal, body, set }) => {
        const { connector } = body
        const created =
          connector === undefined
            ? await connections.create(principal, access, body)
            : await connectors.create(principal, access, { ...body, connector })
        set.status = 201
        return created
      },
      {
        params: OrgParams,
        body: CreateConnectionBody,
        response: {
          201: t.Union([modelRef('ConnectionSignIn', ConnectionSignIn), modelRef('Connection', Connection)]),
          ...errorResponses(400, 401, 403, 404, 413, 422),
        },
        detail: {
          operationId: 'connections.create',
          tags,
          summary:
            'Store a tool server (its token sealed at rest, never returned), or connect a built-in connector: `connecting`, with the ' +
            'address its owner signs in at (OAuth 2.1 with PKCE); runs name it by id or name',
        },
      },
    )
    .post(
      '/o/:org/connections/:connection/sign-in',
      ({ access, principal, params }) => connectors.signInAgain(principal, access, params.connection),
      {
        params: ConnectionParams,
        response: { 200: 'ConnectionSignIn', ...errorResponses(400, 401, 403, 404, 413, 422) },
        detail: {
          operationId: 'connections.signIn',
          tags,
          summary: 'Sign in to one of your built-in connectors again (after `reconnect`): the address to send its owner to',
        },
      },
    )
    .post('/o/:org/connections/callback', ({ access, principal, body }) => connectors.complete(principal, access, body.state, body.code), {
      params: OrgParams,
      body: SignInCallbackBody,
      response: { 200: 'Connection', ...errorResponses(400, 401, 403, 404, 413, 422) },
      detail: {
        operationId: 'connections.completeSignIn',
        tags,
        summary:
          'The end of a sign-in: the `state` and `code` the authorization server sent back, from the user who started it; ' +
          'the connection is `ready`',
      },
    })
    .delete(
      '/o/:org/connections/:connection',
      ({ access, principal, params, set }) => {
        connections.remove(principal, access, params.connection)
        set.status = 204
      },
      {
        params: ConnectionParams,
        response: { 204: t.Void(), ...errorResponses(400, 401, 403, 404, 413) },
        detail: {
          operationId: 'connections.remove',
          tags,
          summary: "Remove one of the caller's tool servers; sessions started with it keep their copy",
        },
      },
    )
    .get('/o/:org/projects/:project/connections', ({ access, params }) => connections.projectConnectors(access.orgId, params.project), {
      params: ProjectParams,
      response: { 200: t.Object({ data: t.Array(modelRef('ProjectConnector', ProjectConnector)) }), ...errorResponses(401, 403, 404) },
      detail: {
        operationId: 'projectConnectors.list',
        tags,
        summary: 'The Project’s connectors: tool servers every run of it gets, key runs included (never their tokens)',
      },
    })
    .put(
      '/o/:org/projects/:project/connections/:connection',
      ({ access, principal, params }) => connections.attachToProject(principal, access, params.project, params.connection),
      {
        params: ProjectConnectorParams,
        response: { 200: 'ProjectConnector', ...errorResponses(400, 401, 403, 404, 409, 413, 422) },
        detail: {
          operationId: 'projectConnectors.attach',
          tags,
          summary:
            'Lend one of your connections to every run of the Project (admins; its token stays on the server, added by the egress proxy)',
        },
      },
    )
    .delete(
      '/o/:org/projects/:project/connections/:connection',
      ({ access, params, set }) => {
        connections.detachFromProject(access, params.project, params.connection)
        set.status = 204
      },
      {
        params: ProjectConnectorParams,
        response: { 204: t.Void(), ...errorResponses(400, 401, 403, 404, 413) },
        detail: {
          operationId: 'projectConnectors.detach',
          tags,
          summary: 'Take a connector from the Project (admins): later runs go without it; earlier ones keep their copy',
        },
      },
    )
