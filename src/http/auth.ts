import { Elysia } from 'elysia'
import type { ApiKeyScope } from '../domain/api-keys'
import { bodyLimit, parseBody } from './body'

/**
 * What the routes' authentication asks of identity (its AuthService): who the bearer is, whether
 * an API key may call the route, and the caller's standing in an org. `P` is the principal and `A`
 * the access the routes' handlers receive.
 */
export interface Authenticator<P, A> {
  authenticate(authorization: string | undefined): Promise<P>
  authorizeKey(principal: P, scope: ApiKeyScope | null): void
  access(principal: P, org: string): A
}

export interface AuthOptions {
  /** The media type the OpenAPI document gives the routes' bodies: JSON, or multipart for uploads. */
  media?: 'json' | 'formdata'
}

/**
 * The session routes, as Elysia names a route (its path template): a Project's sessions and
 * everything under one session, and the org-wide search (spec sections 4.1 to 4.4, contract
 * section 5). Nothing else.
 */
const SESSION_ROUTE = /^\/o\/:org\/(?:sessions|p\/:project\/sessions(?:\/.*)?)$/

/**
 * What an API key needs to call a route: on a session route `runs:read` to GET and `runs:write`
 * to POST or PATCH (contract section 5); anywhere else null, which refuses every key with 401
 * (spec section 5, contract section 11). Decided here from the route's path template alone, for
 * every route behind `authPlugin` or `orgScope`, so no route group can let keys in by forgetting
 * an option (test/security/key-routes.test.ts walks the OpenAPI document).
 */
export function keyScopeFor(method: string, route: string): ApiKeyScope | null {
  if (!SESSION_ROUTE.test(route)) return null
  return method === 'GET' || method === 'HEAD' ? 'runs:read' : 'runs:write'
}

/** Principals found while parsing a request's body, for its resolve to take instead of a second check. */
const parsedBy = new WeakMap<Request, unknown>()

/**
 * Resolves `principal` from the bearer token on every route registered after it.
 *
 * A route with a body authenticates in the parse phase, before a byte of the body is read (Elysia
 * reads the body before `resolve` otherwise), then reads it under the route's size limit and
 * nesting depth (see body.ts): an unauthenticated caller cannot make the server hold or parse
 * anything. Routes without a body authenticate in `resolve`.
 */
export const authPlugin = <P, A>(auth: Authenticator<P, A>, options: AuthOptions = {}) => authenticating(auth, options, 'agentd/auth')

/**
 * `authPlugin` plus `access`: the caller's standing in the route's org (`:org`), resolved once per
 * request (403 when not a member, 404 when there is no such org) for every route registered after
 * it. Every `/o/:org/…` route group mounts this instead of asking in each handler.
 */
export const orgScope = <P, A>(auth: Authenticator<P, A>, options: AuthOptions = {}) =>
  authenticating(auth, options, 'agentd/org-scope').resolve({ as: 'scoped' }, ({ principal, params }) => ({
    access: auth.access(principal, (params as { org: string }).org),
  }))

function authenticating<P, A>(auth: Authenticator<P, A>, options: AuthOptions, name: string) {
  const principalOf = async (request: Request, route: string): Promise<P> => {
    // One header read from the request, not `headers`: naming that would copy them all on each request.
    const principal = await auth.authenticate(request.headers.get('authorization') ?? undefined)
    auth.authorizeKey(principal, keyScopeFor(request.method, route))
    return principal
  }
  const media = options.media ?? 'json'
  return (
    new Elysia({ name, seed: media })
      // One parameter, destructured: Elysia reads the names to decide what to prepare (`route` here).
      .onParse({ as: 'scoped' }, async ({ request, route }) => {
        parsedBy.set(request, await principalOf(request, route))
        return parseBody(request, bodyLimit(request.method, route))
      })
      // Never runs (the hook above always answers or throws): the OpenAPI document lists a body's
      // media types from the named parsers of its route, and this one names `media`. A scoped hook
      // takes a named parser only in Elysia's `{fn}` form (a bare string throws), which its types lack.
      .onParse({ as: 'scoped' }, { fn: media } as never)
      .resolve({ as: 'scoped' }, async ({ request, route }) => ({
        principal: (parsedBy.get(request) as P | undefined) ?? (await principalOf(request, route)),
      }))
  )
}

/**
 * Whether the bearer a stream was opened with still reads the org's sessions, asked the way a new
 * request would be (through the same caches): false once a key is revoked or rotated, a token
 * expires, or its user leaves the org.
 */
export const stillAllowed =
  <P, A>(auth: Authenticator<P, A>, authorization: string | undefined, org: string) =>
  async () => {
    const principal = await auth.authenticate(authorization)
    auth.authorizeKey(principal, 'runs:read')
    auth.access(principal, org)
    return true
  }
