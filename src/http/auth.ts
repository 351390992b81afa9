import { Elysia } from 'elysia'
import type { AuthService } from '../services/auth'

export interface AuthOptions {
  /**
   * Session routes only: API keys may call them, GET with `runs:read`, POST and PATCH with
   * `runs:write` (contract section 5). Everywhere else a key is refused with 401 (spec section 5).
   */
  apiKeys?: boolean
}

const scopeFor = (method: string) => (method === 'GET' || method === 'HEAD' ? 'runs:read' : 'runs:write')

/** Resolves `principal` from the bearer token on every route registered after it. */
export const authPlugin = (auth: AuthService, options: AuthOptions = {}) =>
  new Elysia({ name: 'agentd/auth', seed: options.apiKeys === true }).resolve({ as: 'scoped' }, async ({ request }) => {
    // One header read from the request, not `headers`: naming that would copy them all on each request.
    const principal = await auth.authenticate(request.headers.get('authorization') ?? undefined)
    auth.authorizeKey(principal, options.apiKeys ? scopeFor(request.method) : null)
    return { principal }
  })
