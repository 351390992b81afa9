import { Elysia, t } from 'elysia'
import { ApiError, type ErrorKind } from '../domain/errors'
import { BAD_PERCENT_ENCODING } from './path-params'
import { requestIdOf } from './request-id'

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

/** The envelope as the named model `Error`: one component, which every route's error answers refer to. */
export const errorModel = new Elysia({ name: 'agentd/models/error' }).model({ Error: ErrorBody })

/** The envelope for each status, by its model name (`Error`, errorModel): one component. */
export function errorResponses(...statuses: number[]) {
  return Object.fromEntries(statuses.map((s) => [s, 'Error'])) as Record<number, 'Error'>
}

/** The `{code, message}` envelope (spec section 7), used by the org-wide search. */
export const MessageErrorBody = t.Object(
  {
    code: t.String(),
    message: t.String(),
    requestId: t.Optional(t.String()),
    fields: t.Optional(t.Array(t.Object({ path: t.String(), message: t.String() }))),
  },
  { additionalProperties: true },
)

export function messageErrorResponses(...statuses: number[]) {
  return Object.fromEntries(statuses.map((s) => [s, MessageErrorBody])) as Record<number, typeof MessageErrorBody>
}

/**
 * Mounted by a route group whose errors all use `{code, message}`: it marks the request (at
 * transform, so before validation and auth) and the error plugin reads the mark.
 */
export const messageEnvelope = () => new Elysia().derive({ as: 'scoped' }, () => ({ errorEnvelope: 'message' as const }))

/** The HTTP status of each kind of error: the one place services' errors meet HTTP. */
export const STATUS_OF: Record<ErrorKind, number> = {
  invalid: 400,
  unauthenticated: 401,
  payment_required: 402,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  too_large: 413,
  unprocessable: 422,
  rate_limited: 429,
  unavailable: 503,
}

/** Codes for errors that carry none, where the `{code, message}` envelope requires one. */
const STATUS_CODES: Record<number, string> = {
  400: 'VALIDATION_ERROR',
  401: 'AUTH_FAILED',
  403: 'FORBIDDEN',
  404: 'NOT_FOUND',
  409: 'CONFLICT',
  413: 'PAYLOAD_TOO_LARGE',
  500: 'INTERNAL_ERROR',
}

function asMessageEnvelope(status: number, body: Record<string, unknown>): Record<string, unknown> {
  const { error, code, error_code, ...rest } = body
  return { code: code ?? error_code ?? STATUS_CODES[status] ?? `HTTP_${status}`, message: error, ...rest }
}

interface FieldIssue {
  path: string
  message: string
}

/** TypeBox validation issues of an Elysia ValidationError, as `{path, message}`. */
function issuesOf(error: unknown): FieldIssue[] {
  const {
    all = [],
    type,
    value,
  } = error as { all?: { path?: string; message?: string; summary?: string }[]; type?: string; value?: unknown }
  // A query or path value Elysia coerced alone (type `property`) carries no path of its own.
  const whole = type === 'body' ? '(body)' : '(request)'
  return all.slice(0, 10).map((e) => {
    const path = (e.path ?? '').replace(/^\//, '').replaceAll('/', '.') || whole
    // Elysia decodes path parameters and leaves null where the percent-encoding is malformed.
    if (type === 'params' && (value as Record<string, unknown> | undefined)?.[path] === null) return { path, message: BAD_PERCENT_ENCODING }
    // Never what the caller sent: Elysia's summary ends `but found: <value>`, and that value may be
    // a secret sent in the wrong shape (`{"value": ["…"]}`), which an error must not repeat.
    return { path, message: (e.summary ?? e.message ?? 'invalid').replace(/ but found: [\s\S]*$/, '') }
  })
}

function sentence(issues: FieldIssue[]): string {
  const first = issues[0]
  if (!first) return 'The request is invalid'
  if (first.path === '(body)') return `The request body is invalid: ${first.message}`
  if (first.path === '(request)') return `The request is invalid: ${first.message}`
  return `${first.path}: ${first.message}`
}

/** The `{error, code?}` body of a failure; sets the status. */
function errorBody({ code, error: thrown, set, request }: ErrorContext): Record<string, unknown> {
  // Elysia wraps whatever the parse phase throws in a ParseError; authentication and the body
  // limits run there (http/auth.ts), and their ApiError is the answer.
  const cause = code === 'PARSE' ? (thrown as { cause?: unknown }).cause : undefined
  const error = cause instanceof ApiError ? cause : thrown
  // instanceof rather than Elysia's `.error()` codes: those are local to the instance declaring them.
  if (error instanceof ApiError) {
    set.status = STATUS_OF[error.kind]
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
  console.error(`agentd: ${request.method} ${new URL(request.url).pathname} failed (request ${requestIdOf(request)}):`, error)
  set.status = 500
  return { error: 'Internal error' }
}

interface ErrorContext {
  code: unknown
  error: unknown
  set: { status?: unknown; headers: Record<string, unknown> }
  request: Request
}

/**
 * Maps every failure to the spec's envelope: thrown ApiErrors, validation and parse errors (400),
 * unknown routes (404); anything else is a bug, logged and answered with a bare 500. Routes marked
 * with `messageEnvelope()` get `{code, message}` instead of `{error, code?}`.
 */
// The handler names what it reads: Elysia looks at a hook's parameters to decide what to prepare
// for every request, and a whole `context` would make each one parse cookies and copy headers.
export const errorPlugin = new Elysia({ name: 'agentd/errors' }).onError({ as: 'global' }, ({ code, error, set, request, ...context }) => {
  set.headers['content-type'] = 'application/json'
  const requestId = requestIdOf(request)
  set.headers['x-request-id'] = requestId
  const body = { ...errorBody({ code, error, set, request }), requestId }
  const marked = (context as { errorEnvelope?: unknown }).errorEnvelope === 'message'
  return marked ? asMessageEnvelope(Number(set.status), body) : body
})
