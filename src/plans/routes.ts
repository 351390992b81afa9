import { Elysia } from 'elysia'
import type { AuthService } from '../identity/auth'
import { orgScope } from '../http/auth'
import { errorResponses, errorModel } from '../http/errors'
import { planModels } from './model'
import { OrgParams } from '../domain/api-schemas'
import type { PlanService } from './service'

/** Contract section 9: the org's plan, its usage in the current periods and its limits (admins). */
export const planRoutes = (auth: AuthService, plans: PlanService) =>
  new Elysia({ name: 'agentd/plans' })
    .use(errorModel)
    .use(planModels)
    .use(orgScope(auth))
    .get('/o/:org/usage', ({ access }) => plans.view(access), {
      params: OrgParams,
      response: { 200: 'Usage', ...errorResponses(401, 403, 404) },
      detail: {
        operationId: 'usage.get',
        tags: ['plans'],
        summary: "The org's plan, what it used this calendar month and ISO week (UTC), and its limits (admins)",
      },
    })
