import { readFileSync } from 'node:fs'
import { Elysia } from 'elysia'
import type { AuthService } from '../identity/auth'
import { MERMAID_SCRIPT, type StatechartService } from './service'
import { authPlugin } from '../http/auth'
import { errorResponses } from '../http/errors'
import { HtmlPage, Script, StatechartQuery } from './model'
import { models } from '../http/models'

const tags = ['lifecycle']
let gzipped: Uint8Array | undefined

/** The session lifecycle chart in the browser (signed-in callers only; API keys get 401). */
export const statechartRoutes = (auth: AuthService, charts: StatechartService) => {
  return new Elysia({ name: 'agentd/statechart' }).use(models)
    .use(authPlugin(auth))
    .get(
      '/statechart',
      ({ principal, query }) => new Response(charts.page(principal, query.session), { headers: { 'content-type': 'text/html; charset=utf-8' } }),
      {
        query: StatechartQuery,
        response: { 200: HtmlPage, ...errorResponses(400, 401, 404) },
        detail: { operationId: 'statechart.page', tags, summary: 'The session lifecycle as a state chart; with ?session=<id> that session’s state and history' },
      },
    )
    .get(
      '/statechart/mermaid.min.js',
      ({ headers }) => {
        const type = { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': 'private, max-age=86400' }
        if (!/\bgzip\b/.test(headers['accept-encoding'] ?? '')) return new Response(Bun.file(MERMAID_SCRIPT), { headers: type })
        // 5 MB of JavaScript: compressed once, on first use, to about a fifth.
        gzipped ??= Bun.gzipSync(readFileSync(MERMAID_SCRIPT))
        return new Response(gzipped, { headers: { ...type, 'content-encoding': 'gzip', vary: 'accept-encoding' } })
      },
      {
        response: { 200: Script, ...errorResponses(401) },
        detail: { operationId: 'statechart.script', tags, summary: 'The Mermaid renderer the chart page uses, served by agentd' },
      },
    )
}
