import { Elysia, t } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { agentModels, AgentParams, AgentRevision, CreateAgentBody, PatchAgentBody, SavedAgent } from './model'
import { modelRef } from '../domain/schema-util'
import { OrgParams } from '../domain/api-schemas'
import type { AgentService } from './service'

const tags = ['agents']

/**
 * Saved agents (shape B `agent_id`): an org's members keep and run them; only an agent's creator or
 * an org admin changes or deletes it. Signed-in callers only: a key run may not name one.
 */
export const agentProfileRoutes = (auth: AuthService, agents: AgentService) =>
  new Elysia({ name: 'agentd/saved-agents' })
    .use(errorModel)
    .use(agentModels)
    .use(orgScope(auth))
    .post(
      '/o/:org/agents',
      ({ access, principal, body, set }) => {
        const created = agents.create(principal, access, body)
        set.status = 201
        return created
      },
      {
        params: OrgParams,
        body: CreateAgentBody,
        response: { 201: 'SavedAgent', ...errorResponses(400, 401, 403, 404, 413, 422) },
        detail: { operationId: 'agents.create', tags, summary: 'Save an agent setup (revision 1, reviewed against the current catalog)' },
      },
    )
    .get('/o/:org/agents', ({ access }) => agents.list(access), {
      params: OrgParams,
      response: { 200: t.Object({ data: t.Array(modelRef('SavedAgent', SavedAgent)) }), ...errorResponses(401, 403, 404) },
      detail: { operationId: 'agents.list', tags, summary: "The org's saved agents, newest first" },
    })
    .get('/o/:org/agents/:agent', ({ access, params }) => agents.get(access, params.agent), {
      params: AgentParams,
      response: { 200: 'SavedAgent', ...errorResponses(401, 403, 404) },
      detail: { operationId: 'agents.get', tags, summary: 'One saved agent at its current revision' },
    })
    .patch('/o/:org/agents/:agent', ({ access, principal, params, body }) => agents.update(principal, access, params.agent, body), {
      params: AgentParams,
      body: PatchAgentBody,
      response: { 200: 'SavedAgent', ...errorResponses(400, 401, 403, 404, 413, 422) },
      detail: {
        operationId: 'agents.update',
        tags,
        summary: 'Rename, change (a new revision) or review again against the current catalog (review: true); its creator or an org admin',
      },
    })
    .delete(
      '/o/:org/agents/:agent',
      ({ access, principal, params, set }) => {
        agents.remove(principal, access, params.agent)
        set.status = 204
      },
      {
        params: AgentParams,
        response: { 204: t.Void(), ...errorResponses(400, 401, 403, 404, 413) },
        detail: {
          operationId: 'agents.remove',
          tags,
          summary: 'Delete a saved agent and its revisions (its creator or an org admin); runs of it keep their snapshot',
        },
      },
    )
    .get('/o/:org/agents/:agent/revisions', ({ access, params }) => agents.revisions(access, params.agent), {
      params: AgentParams,
      response: { 200: t.Object({ data: t.Array(AgentRevision) }), ...errorResponses(401, 403, 404) },
      detail: { operationId: 'agents.revisions', tags, summary: "A saved agent's revisions, newest first" },
    })
