import { badRequest } from '../domain/errors'

/** The message for a path parameter whose percent-encoding is malformed (`%ZZ`, a cut `%E0%A4%A`). */
export const BAD_PERCENT_ENCODING = 'is not valid percent-encoded UTF-8'

/** decodeURIComponent for a path parameter Elysia leaves encoded (the `*` wildcard): 400 when malformed. */
export function decodePathParam(name: string, value: string): string {
  try {
    return decodeURIComponent(value)
  } catch {
    throw badRequest(`${name} ${BAD_PERCENT_ENCODING}`)
  }
}
