import { Elysia, t } from 'elysia'
import { ApiError } from '../domain/errors'

/** The spec's error envelope (section 7), declared once for OpenAPI. */
export const ErrorBody = t.Object(
  {
    error: t.String(),
    code: t.Optional(t.String()),
    error_code: t.Optional(t.String()),
    requestId: t.Optional(t.String()),
    fields: t.Optional(t.Array(t.Object({ path: t.String(), message: t.String() }))),
  },
  { additionalProperties: true },
)

export function errorResponses(...statuses: number[]) {
  return Object.fromEntries(statuses.map((s) => [s, ErrorBody])) as Record<number, typeof ErrorBody>
}

interface FieldIssue {
  path: string
  message: string
}

/** TypeBox validation issues of an Elysia ValidationError, as `{path, message}`. */
function issuesOf(error: unknown): FieldIssue[] {
  const all = (error as { all?: { path?: string; message?: string; summary?: string }[] }).all ?? []
  return all.slice(0, 10).map((e) => ({ path: (e.path ?? '').replace(/^\//, '').replaceAll('/', '.') || '(body)', message: e.summary ?? e.message ?? 'invalid' }))
}

function sentence(issues: FieldIssue[]): string {
  const first = issues[0]
  if (!first) return 'The request is invalid'
  if (first.path === '(body)') return `The request body is invalid: ${first.message}`
  return `${first.path}: ${first.message}`
}

/**
 * Maps every failure to the spec's envelope: thrown ApiErrors, validation and parse errors (400),
 * unknown routes (404); anything else is a bug, logged and answered with a bare 500.
 */
export const errorPlugin = new Elysia({ name: 'agentd/errors' })
  .onError({ as: 'global' }, ({ code, error, set, request }) => {
    set.headers['content-type'] = 'application/json'
    // instanceof rather than Elysia's `.error()` codes: those are local to the instance declaring them.
    if (error instanceof ApiError) {
      set.status = error.status
      return { error: error.message, ...(error.code ? { [error.codeField]: error.code } : {}), ...error.extra }
    }
    if (code === 'VALIDATION') {
      const issues = issuesOf(error)
      set.status = 400
      return { error: sentence(issues), code: 'VALIDATION_ERROR', fields: issues }
    }
    if (code === 'PARSE') {
      set.status = 400
      return { error: 'The request body is not valid JSON', code: 'VALIDATION_ERROR' }
    }
    if (code === 'NOT_FOUND') {
      set.status = 404
      return { error: 'Not found' }
    }
    console.error(`agentd: ${request.method} ${new URL(request.url).pathname} failed:`, error)
    set.status = 500
    return { error: 'Internal error' }
  })
