import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js'
import { z } from 'zod'

export interface TestMcpServer {
  /** The server's streamable HTTP endpoint. */
  url: string
  /** The Authorization header of every request it got ('' when none). */
  authorizations: string[]
  /** The ids its `lookup` tool was called with. */
  lookups: string[]
  /** With `oauth`: the subject of each accepted access token, in order. */
  subjects: string[]
  stop(): void
}

/** A tool server behind OAuth (MCP's authorization spec): it names its authorization server and takes only its tokens. */
export interface McpOauth {
  issuer: string
  /** The subject of an access token issued for `resource`, or null. */
  verify(token: string, resource: string): Promise<string | null>
}

/**
 * A tool server made with the official MCP SDK (streamable HTTP, stateless): one tool, `lookup`,
 * that answers `ticket <id>: open, assigned to ada`. It records what it was sent. With `oauth` it
 * serves its protected resource metadata (RFC 9728) and answers 401 to a request without a valid
 * access token of that authorization server.
 */
export function startMcpServer(oauth?: McpOauth): TestMcpServer {
  const authorizations: string[] = []
  const lookups: string[] = []
  const subjects: string[] = []
  let url = ''
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    fetch: async (request) => {
      const { pathname, origin } = new URL(request.url)
      if (oauth && pathname.startsWith('/.well-known/oauth-protected-resource'))
        return Response.json({ resource: url, authorization_servers: [oauth.issuer], scopes_supported: ['tickets'] })
      authorizations.push(request.headers.get('authorization') ?? '')
      if (oauth) {
        const token = /^Bearer (.+)$/.exec(request.headers.get('authorization') ?? '')?.[1]
        const subject = token ? await oauth.verify(token, url) : null
        if (!subject)
          return new Response('a valid access token is needed', {
            status: 401,
            headers: { 'www-authenticate': `Bearer resource_metadata="${origin}/.well-known/oauth-protected-resource/mcp"` },
          })
        subjects.push(subject)
      }
      const mcp = new McpServer({ name: 'tickets', version: '1.0.0' })
      mcp.registerTool('lookup', { description: 'Looks up a ticket by its id', inputSchema: { id: z.string() } }, async ({ id }) => {
        lookups.push(id)
        return { content: [{ type: 'text', text: `ticket ${id}: open, assigned to ada` }] }
      })
      const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
      await mcp.connect(transport)
      return transport.handleRequest(request)
    },
  })
  url = `http://127.0.0.1:${server.port}/mcp`
  return { url, authorizations, lookups, subjects, stop: () => server.stop(true) }
}
