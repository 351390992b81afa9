/**
 * What the OpenAPI plugin's document gets wrong or cannot say, set right before it is served
 * (checked by `redocly lint` in test/http/openapi-lint.test.ts):
 * - a response without a body (204) carries no `content` (the plugin wrote `{type: "void"}` there);
 * - the artifact route's wildcard is the path parameter `{name}` (the plugin named it `*`);
 * - string bodies get their real media types: the event stream, artifact bytes, the HTML chart;
 *   the trajectory's raw lines (Accept: application/x-ndjson) are listed beside its JSON;
 * - a `servers` entry: the API is served from this document's own origin.
 */

type Operation = {
  operationId?: string
  parameters?: { name: string; in: string; description?: string }[]
  responses?: Record<string, { content?: Record<string, unknown> }>
}
type Doc = { servers?: unknown[]; info?: Record<string, unknown>; paths: Record<string, Record<string, Operation>> }

/** The media type of a 2xx string body, by operation. */
const MEDIA_TYPES: Record<string, string> = {
  'sessions.events': 'text/event-stream',
  'artifacts.download': 'application/octet-stream',
  'statechart.page': 'text/html',
}

export function finishOpenApi(raw: unknown): unknown {
  if (!raw || typeof raw !== 'object' || !('paths' in raw)) return raw
  const doc = structuredClone(raw) as Doc
  doc.servers = [{ url: '/', description: 'this agentd' }]
  const paths: Doc['paths'] = {}
  for (const [path, operations] of Object.entries(doc.paths)) {
    const named = path.replace(/\/\*$/, '/{name}')
    for (const operation of Object.values(operations)) {
      for (const param of operation.parameters ?? []) {
        if (param.in === 'path' && param.name === '*')
          Object.assign(param, { name: 'name', description: 'The artifact’s name; it may contain `/`.' })
      }
      for (const [status, response] of Object.entries(operation.responses ?? {})) {
        const content = response.content
        if (content && 'type' in content) delete response.content
        const media = operation.operationId ? MEDIA_TYPES[operation.operationId] : undefined
        if (media && status.startsWith('2') && response.content?.['text/plain'])
          response.content = { [media]: response.content['text/plain'] }
        if (operation.operationId === 'sessions.trajectory' && status === '200' && response.content) {
          response.content['application/x-ndjson'] = {
            schema: { type: 'string', description: 'The raw transcript, one JSON line per CLI output line.' },
          }
        }
      }
    }
    paths[named] = operations
  }
  doc.paths = paths
  return doc
}
