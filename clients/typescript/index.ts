import createClient from 'openapi-fetch'
import type { components, paths } from './schema'

export type { components, paths }

/**
 * A typed client of agentd's API: `schema.d.ts` is generated from its OpenAPI document
 * (`bun run client:generate`, checked against the live document in test/clients/client.test.ts), and
 * every path, parameter, body and answer below is typed from it.
 *
 *   const agentd = agentdClient('https://agentd.example.com', process.env.AGENTD_TOKEN!)
 *   const { data, error } = await agentd.POST('/o/{org}/p/{project}/sessions', { params: { path: { org, project: '_' } }, body: { agent: 'harness_1', prompt } })
 */
export function agentdClient(baseUrl: string, token: string, options: { fetch?: (request: Request) => Promise<Response> } = {}) {
  return createClient<paths>({ baseUrl: baseUrl.replace(/\/+$/, ''), headers: { authorization: `Bearer ${token}` }, ...options })
}

export type AgentdClient = ReturnType<typeof agentdClient>
