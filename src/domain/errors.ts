/**
 * What went wrong, said in the request's terms, never a protocol's: src/http/errors.ts maps each
 * kind to an HTTP status, so services and the machine know nothing of HTTP.
 */
export const ERROR_KINDS = [
  'invalid',
  'unauthenticated',
  'payment_required',
  'forbidden',
  'not_found',
  'conflict',
  'too_large',
  'unprocessable',
  'rate_limited',
  'unavailable',
] as const
export type ErrorKind = (typeof ERROR_KINDS)[number]

/**
 * Errors a service throws; the HTTP error plugin turns them into the spec's envelope (section 7).
 * `code` goes out as `code`, or as `error_code` where the spec names it so.
 */
export class ApiError extends Error {
  constructor(
    readonly kind: ErrorKind,
    message: string,
    readonly code?: string,
    readonly extra: Record<string, unknown> = {},
    readonly codeField: 'code' | 'error_code' = 'code',
  ) {
    super(message)
  }
}

export const notFound = (what = 'Not found') => new ApiError('not_found', what)
export const authFailed = (why = 'Authentication failed') => new ApiError('unauthenticated', why, 'AUTH_FAILED')
export const badRequest = (message: string, code = 'VALIDATION_ERROR', extra: Record<string, unknown> = {}) =>
  new ApiError('invalid', message, code, extra)
export const conflict = (message: string, code?: string) => new ApiError('conflict', message, code)
export const forbidden = (message: string, code?: string) => new ApiError('forbidden', message, code)
export const unprocessable = (message: string, code: string, codeField: 'code' | 'error_code' = 'code') =>
  new ApiError('unprocessable', message, code, {}, codeField)
