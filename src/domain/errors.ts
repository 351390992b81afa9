/**
 * Errors a service throws; the HTTP error plugin turns them into the spec's envelope (section 7).
 * `code` goes out as `code`, or as `error_code` where the spec names it so.
 */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
    readonly extra: Record<string, unknown> = {},
    readonly codeField: 'code' | 'error_code' = 'code',
  ) {
    super(message)
  }
}

export const notFound = (what = 'Not found') => new ApiError(404, what)
export const authFailed = (why = 'Authentication failed') => new ApiError(401, why, 'AUTH_FAILED')
export const badRequest = (message: string, code = 'VALIDATION_ERROR', extra: Record<string, unknown> = {}) =>
  new ApiError(400, message, code, extra)
export const conflict = (message: string, code?: string) => new ApiError(409, message, code)
export const unprocessable = (message: string, code: string, codeField: 'code' | 'error_code' = 'code') =>
  new ApiError(422, message, code, {}, codeField)
