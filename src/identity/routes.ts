import { Elysia, t } from 'elysia'
import { authPlugin } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import type { AuthService } from './auth'
import type { IdentityService } from './service'

const Me = t.Object({
  email: t.String(),
  name: t.Union([t.String(), t.Null()]),
  orgs: t.Array(t.Object({ slug: t.String(), role: t.Union([t.Literal('admin'), t.Literal('member')]) })),
})

/** Who the caller is and which orgs it may open: what the console asks first (signed-in callers; API keys get 401). */
export const identityRoutes = (auth: AuthService, identity: IdentityService) =>
  new Elysia({ name: 'agentd/identity' })
    .use(errorModel)
    .use(authPlugin(auth))
    .get(
      '/me',
      ({ principal }) => ({
        email: principal.email,
        name: principal.name,
        orgs: principal.userId ? identity.orgsOf(principal.userId).map(({ slug, role }) => ({ slug, role })) : [],
      }),
      {
        response: { 200: Me, ...errorResponses(401) },
        detail: {
          operationId: 'me.get',
          tags: ['identity'],
          summary: 'The signed-in caller: email, name, and the orgs it belongs to with its role',
        },
      },
    )
