import { Elysia, t } from 'elysia'
import { notFound } from '../domain/errors'
import type { ConsoleBundle } from './bundle'

/** The identity provider the console signs people in with (authorization code with PKCE); null: tokens are pasted. */
export interface ConsoleOidc {
  issuer: string
  /** The console's client id at the provider: agentd's audience, so its ID tokens open the API. */
  clientId: string
}

/**
 * Only this server's own scripts and styles run (and the page's one inline script, by its hash);
 * the API is asked on this origin alone, and the identity provider (its discovery and token
 * endpoints) when there is one. Styles may be inline for the state chart's own SVG page, shown in
 * a frame.
 */
const csp = (oidc: ConsoleOidc | null, inlineScript: string) =>
  [
    "default-src 'self'",
    `script-src 'self' ${inlineScript}`,
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    `connect-src 'self'${oidc ? ` ${new URL(oidc.issuer).origin}` : ''}`,
    "frame-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ')

const page = async (bundle: ConsoleBundle, oidc: ConsoleOidc | null) => {
  const { html, inlineScript } = await bundle.assets()
  return new Response(html, {
    headers: {
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-cache',
      'content-security-policy': csp(oidc, inlineScript),
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
    },
  })
}

/**
 * The console (`/console`, every path under it the same page: the app routes itself), and its
 * bundled files, named by their content's hash so they are cached for good. No auth here: the page
 * holds nothing; what it shows it asks of the API with the caller's token.
 */
export const consoleRoutes = (bundle: ConsoleBundle, oidc: ConsoleOidc | null) =>
  new Elysia({ name: 'agentd/console' })
    .get('/console', () => page(bundle, oidc), { detail: { hide: true } })
    // What the page needs to know before anyone signs in: whether, and where, it may send them.
    .get('/console/config.json', () => ({ oidc }), { detail: { hide: true } })
    .get(
      '/console/assets/:file',
      async ({ params }) => {
        const file = (await bundle.assets()).files.get(params.file)
        if (!file) throw notFound('No such console file')
        return new Response(file.body, {
          headers: {
            'content-type': file.type,
            'cache-control': 'public, max-age=31536000, immutable',
            'x-content-type-options': 'nosniff',
          },
        })
      },
      { params: t.Object({ file: t.String() }), detail: { hide: true } },
    )
    .get('/console/*', () => page(bundle, oidc), { detail: { hide: true } })
