import { ApiError, badRequest } from '../domain/errors'

const KiB = 1024
const MiB = 1024 * KiB

/** Routes whose body carries a prompt (session create, follow-up message). */
export const PROMPT_BODY_LIMIT = MiB
/** Every other JSON body: settings and names, never large. */
export const JSON_BODY_LIMIT = 64 * KiB
/**
 * What the Bun server accepts at all: the largest route limit plus slack, so a route's own limit
 * answers first (in the envelope) and the server's cap only stops a body no route would take.
 */
export const SERVER_BODY_LIMIT = 2 * MiB
/** Deeper JSON is refused before parsing: no request body of this API nests past a few levels. */
export const MAX_JSON_DEPTH = 64

/** `METHOD route` of the prompt routes, as Elysia names a route (its path pattern). */
const PROMPT_ROUTES = new Set(['POST /o/:org/p/:project/sessions', 'POST /o/:org/p/:project/sessions/:session/messages'])

export function bodyLimit(method: string, route: string): number {
  return PROMPT_ROUTES.has(`${method} ${route}`) ? PROMPT_BODY_LIMIT : JSON_BODY_LIMIT
}

const sizeName = (bytes: number) => (bytes >= MiB ? `${bytes / MiB} MiB` : `${bytes / KiB} KiB`)

// The spec names no code for 413; this one is recorded in docs/decisions.md.
export const payloadTooLarge = (limit: number) => new ApiError('too_large', `The request body is larger than ${sizeName(limit)}`, 'PAYLOAD_TOO_LARGE')

/**
 * The body's bytes, refusing past `limit` bytes: at once from Content-Length, and while reading a
 * body sent without one (chunked), so no more than `limit` bytes are ever held. Null without body.
 */
export async function readBody(request: Request, limit: number): Promise<Uint8Array | null> {
  const declared = request.headers.get('content-length')
  if (declared !== null && Number(declared) > limit) throw payloadTooLarge(limit)
  if (!request.body) return null
  const reader = request.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > limit) {
      // Not awaited: the rest of the body is the client's problem, the answer goes out now.
      reader.cancel().catch(() => {})
      throw payloadTooLarge(limit)
    }
    chunks.push(value)
  }
  if (chunks.length === 1) return chunks[0]!
  const bytes = new Uint8Array(total)
  let at = 0
  for (const chunk of chunks) {
    bytes.set(chunk, at)
    at += chunk.byteLength
  }
  return bytes
}

const QUOTE = 0x22
const BACKSLASH = 0x5c

/**
 * Whether JSON text nests `[`/`{` deeper than `max` outside strings. A byte scan, linear and
 * without recursion: JSON.parse and schema validation recurse per level, and 100,000 levels
 * overflow the stack (and stalled the server) before any schema could refuse them.
 */
export function nestsDeeperThan(bytes: Uint8Array, max: number): boolean {
  let depth = 0
  for (let i = 0; i < bytes.length; i++) {
    const byte = bytes[i]!
    if (byte === QUOTE) {
      // Skip the string; an escaped byte (`\"`, `\\`) never ends it. UTF-8 continuation bytes are
      // all >= 0x80, so a multi-byte character never looks like a quote or a backslash.
      for (i++; i < bytes.length; i++) {
        const inner = bytes[i]!
        if (inner === BACKSLASH) i++
        else if (inner === QUOTE) break
      }
    } else if (byte === 0x5b || byte === 0x7b) {
      if (++depth > max) return true
    } else if (byte === 0x5d || byte === 0x7d) {
      depth--
    }
  }
  return false
}

const isJson = (contentType: string) => contentType === 'application/json' || contentType.endsWith('+json')

/**
 * The request body as the route's validation expects it, read under the route's limit: JSON for a
 * JSON content type (refused when malformed or nested too deep), the text for any other type
 * (which the route's schema then refuses), null when there is none: never undefined, which would
 * send Elysia on to its own parsers and read the body a second time.
 */
export async function parseBody(request: Request, limit: number): Promise<unknown> {
  const bytes = await readBody(request, limit)
  if (!bytes || bytes.byteLength === 0) return null
  const mediaType = (request.headers.get('content-type') ?? '').split(';', 1)[0]!.trim().toLowerCase()
  if (!isJson(mediaType)) return new TextDecoder().decode(bytes)
  if (nestsDeeperThan(bytes, MAX_JSON_DEPTH)) throw badRequest(`The request body nests deeper than ${MAX_JSON_DEPTH} levels`)
  try {
    return JSON.parse(new TextDecoder().decode(bytes))
  } catch {
    throw badRequest('The request body is not valid JSON')
  }
}
