import { Elysia } from 'elysia'
import type { AuthService } from '../services/auth'

/** Resolves `principal` from the bearer token on every route registered after it. */
export const authPlugin = (auth: AuthService) =>
  new Elysia({ name: 'agentd/auth' }).resolve({ as: 'scoped' }, async ({ headers }) => ({
    principal: await auth.authenticate(headers.authorization),
  }))
