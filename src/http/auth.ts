import { Elysia } from 'elysia'
import type { AuthService } from '../identity/auth'
import type { Principal } from '../identity/service'
import { bodyLimit, parseBody } from './body'

export interface AuthOptions {
  /**
   * Session routes only: API keys may call them, GET with `runs:read`, POST and PATCH with
   * `runs:write` (contract section 5). Everywhere else a key is refused with 401 (spec section 5).
   */
  apiKeys?: boolean
  /** The media type the OpenAPI document gives the routes' bodies: JSON, or multipart for uploads. */
  media?: 'json' | 'formdata'
}

const scopeFor = (method: string) => (method === 'GET' || method === 'HEAD' ? 'runs:read' : 'runs:write')

/** Principals found while parsing a request's body, for its resolve to take instead of a second check. */
const parsedBy = new WeakMap<Request, Principal>()

/**
 * Resolves `principal` from the bearer token on every route registered after it.
 *
 * A route with a body authenticates in the parse phase, before a byte of the body is read (Elysia
 * reads the body before `resolve` otherwise), then reads it under the route's size limit and
 * nesting depth (see body.ts): an unauthenticated caller cannot make the server hold or parse
 * anything. Routes without a body authenticate in `resolve`.
 */
export const authPlugin = (auth: AuthService, options: AuthOptions = {}) => authenticating(auth, options, 'agentd/auth')

/**
 * `authPlugin` plus `access`: the caller's standing in the route's org (`:org`), resolved once per
 * request (403 when not a member, 404 when there is no such org) for every route registered after
 * it. Every `/o/:org/…` route group mounts this instead of asking in each handler.
 */
export const orgScope = (auth: AuthService, options: AuthOptions = {}) =>
  authenticating(auth, options, 'agentd/org-scope').resolve({ as: 'scoped' }, ({ principal, params }) => ({
    access: auth.access(principal, (params as { org: string }).org),
  }))

function authenticating(auth: AuthService, options: AuthOptions, name: string) {
  const principalOf = async (request: Request): Promise<Principal> => {
    // One header read from the request, not `headers`: naming that would copy them all on each request.
    const principal = await auth.authenticate(request.headers.get('authorization') ?? undefined)
    auth.authorizeKey(principal, options.apiKeys ? scopeFor(request.method) : null)
    return principal
  }
  const media = options.media ?? 'json'
  return new Elysia({ name, seed: `${options.apiKeys === true}:${media}` })
    // One parameter, destructured: Elysia reads the names to decide what to prepare (`route` here).
    .onParse({ as: 'scoped' }, async ({ request, route }) => {
      parsedBy.set(request, await principalOf(request))
      return parseBody(request, bodyLimit(request.method, route))
    })
    // Never runs (the hook above always answers or throws): the OpenAPI document lists a body's
    // media types from the named parsers of its route, and this one names `media`. A scoped hook
    // takes a named parser only in Elysia's `{fn}` form (a bare string throws), which its types lack.
    .onParse({ as: 'scoped' }, { fn: media } as never)
    .resolve({ as: 'scoped' }, async ({ request }) => ({ principal: parsedBy.get(request) ?? (await principalOf(request)) }))
}

/**
 * Whether the bearer a stream was opened with still reads the org's sessions, asked the way a new
 * request would be (through the same caches): false once a key is revoked or rotated, a token
 * expires, or its user leaves the org.
 */
export const stillAllowed = (auth: AuthService, authorization: string | undefined, org: string) => async () => {
  const principal = await auth.authenticate(authorization)
  auth.authorizeKey(principal, 'runs:read')
  auth.access(principal, org)
  return true
}
