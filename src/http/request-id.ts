import { randomBytes } from 'node:crypto'

/** An id a caller may choose: what fits a header and a log line, nothing that could forge either. */
const CALLER_ID = /^[A-Za-z0-9._:-]{1,128}$/

const ids = new WeakMap<Request, string>()

/**
 * The request's id: the caller's `X-Request-Id` when it is a plain token (a proxy's, or a client
 * tracing its own retries), else a new `req_…`. It is answered as `X-Request-Id`, set on every
 * error envelope as `requestId` and logged with the request, so a caller's report finds its line.
 */
export function requestIdOf(request: Request): string {
  let id = ids.get(request)
  if (id === undefined) {
    const given = request.headers.get('x-request-id')
    id = given !== null && CALLER_ID.test(given) ? given : `req_${randomBytes(8).toString('hex')}`
    ids.set(request, id)
  }
  return id
}
