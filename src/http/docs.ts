import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { Elysia } from 'elysia'

/**
 * The API reference page's script and style, served by agentd from the pinned `swagger-ui-dist`
 * package: `/docs` works offline and loads nothing from a CDN. Compressed once, on first use.
 */
const DIST = dirname(require.resolve('swagger-ui-dist/package.json'))
const ASSETS: Record<string, { file: string; type: string }> = {
  'swagger-ui-bundle.js': { file: join(DIST, 'swagger-ui-bundle.js'), type: 'text/javascript; charset=utf-8' },
  'swagger-ui.css': { file: join(DIST, 'swagger-ui.css'), type: 'text/css; charset=utf-8' },
}
const gzipped = new Map<string, Uint8Array>()

/** Where the page loads them from (the OpenAPI plugin's `swagger.cdn` and `swagger.theme`). */
export const DOCS_SCRIPT = '/docs/assets/swagger-ui-bundle.js'
export const DOCS_STYLE = '/docs/assets/swagger-ui.css'

export const docsAssets = () =>
  new Elysia({ name: 'agentd/docs-assets' }).get(
    '/docs/assets/:asset',
    ({ params, headers }) => {
      const asset = ASSETS[params.asset]
      if (!asset)
        return new Response(JSON.stringify({ error: 'Not found' }), { status: 404, headers: { 'content-type': 'application/json' } })
      const type = { 'content-type': asset.type, 'cache-control': 'public, max-age=86400' }
      if (!/\bgzip\b/.test(headers['accept-encoding'] ?? '')) return new Response(Bun.file(asset.file), { headers: type })
      let body = gzipped.get(params.asset)
      if (!body) gzipped.set(params.asset, (body = Bun.gzipSync(readFileSync(asset.file))))
      return new Response(body, { headers: { ...type, 'content-encoding': 'gzip', vary: 'accept-encoding' } })
    },
    { detail: { hide: true } },
  )
