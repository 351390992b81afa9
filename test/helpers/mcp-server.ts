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
  stop(): void
}

/**
 * A tool server made with the official MCP SDK (streamable HTTP, stateless): one tool, `lookup`,
 * that answers `ticket <id>: open, assigned to ada`. It records what it was sent.
 */
export function startMcpServer(): TestMcpServer {
  const authorizations: string[] = []
  const lookups: string[] = []
  const server = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    fetch: async (request) => {
      authorizations.push(request.headers.get('authorization') ?? '')
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
  return { url: `http://127.0.0.1:${server.port}/mcp`, authorizations, lookups, stop: () => server.stop(true) }
}
