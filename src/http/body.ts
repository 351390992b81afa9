import { ApiError, badRequest } from '../domain/errors'

const KiB = 1024
const MiB = 1024 * KiB

/** A follow-up message: its content is at most 256 KiB, so this leaves room for escapes. */
export const PROMPT_BODY_LIMIT = MiB
/** Session create: a prompt, or shape B input whose document blocks carry files as base64. */
export const CREATE_BODY_LIMIT = 16 * MiB
/** An upload's file part (contract section 8). */
export const UPLOAD_FILE_LIMIT = 32 * MiB
/** An upload's whole multipart body: the file part plus its boundaries and part headers. */
export const UPLOAD_BODY_LIMIT = UPLOAD_FILE_LIMIT + 64 * KiB
/** A Project secret's value or environment's setup script (64 KiB each), with room for JSON's escapes (`\u0001` is 6 bytes). */
export const ENVIRONMENT_BODY_LIMIT = 512 * KiB
/** Every other JSON body: settings and names, never large. */
export const JSON_BODY_LIMIT = 64 * KiB
/**
 * What the Bun server accepts at all: the largest route limit plus slack, so a route's own limit
 * answers first (in the envelope) and the server's cap only stops a body no route would take.
 */
export const SERVER_BODY_LIMIT = UPLOAD_BODY_LIMIT + MiB
/** Deeper JSON is refused before parsing: no request body of this API nests past a few levels. */
export const MAX_JSON_DEPTH = 64

/** Routes with a larger body than JSON_BODY_LIMIT, by `METHOD route` as Elysia names a route (its path pattern). */
const LARGE_BODIES = new Map([
  ['POST /o/:org/p/:project/sessions', CREATE_BODY_LIMIT],
  ['POST /o/:org/p/:project/sessions/:session/messages', PROMPT_BODY_LIMIT],
  ['POST /o/:org/files', UPLOAD_BODY_LIMIT],
  ['PUT /o/:org/projects/:project/secrets/:name', ENVIRONMENT_BODY_LIMIT],
  ['PUT /o/:org/projects/:project/environment', ENVIRONMENT_BODY_LIMIT],
])

/** A route's body limit, and what a body over it is answered. */
export interface BodyLimit {
  bytes: number
  refuse: (limit: number) => ApiError
}

/**
 * Routes whose spec answers a body over the limit with 400 `CONTENT_TOO_LARGE` (a follow-up: "over
 * the limit"), rather than the 413 every other route gives.
 */
const CONTENT_LIMITED = new Set(['POST /o/:org/p/:project/sessions/:session/messages'])

const contentTooLarge = (limit: number) =>
  badRequest(`The message body is larger than ${sizeName(limit)}; its content may be at most 256 KiB`, 'CONTENT_TOO_LARGE')

export function bodyLimit(method: string, route: string): BodyLimit {
  const key = `${method} ${route}`
  return { bytes: LARGE_BODIES.get(key) ?? JSON_BODY_LIMIT, refuse: CONTENT_LIMITED.has(key) ? contentTooLarge : payloadTooLarge }
}

const sizeName = (bytes: number) => (bytes >= MiB ? `${bytes / MiB} MiB` : `${bytes / KiB} KiB`)

// The spec names no code for 413; this one is recorded in docs/decisions.md.
export const payloadTooLarge = (limit: number) =>
  new ApiError('too_large', `The request body is larger than ${sizeName(limit)}`, 'PAYLOAD_TOO_LARGE')

/**
 * The body's bytes, refusing past `limit` bytes: at once from Content-Length, and while reading a
 * body sent without one (chunked), so no more than `limit` bytes are ever held. Null without body.
 */
export async function readBody(request: Request, { bytes: limit, refuse }: BodyLimit): Promise<Uint8Array | null> {
  const declared = request.headers.get('content-length')
  if (declared !== null && Number(declared) > limit) throw refuse(limit)
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
      throw refuse(limit)
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

/**
 * A multipart body as an object of its fields (the first value of each name), for the route's
 * schema to check: a file part is a File, any other a string. Malformed multipart is a 400.
 */
async function formFields(bytes: Uint8Array, contentType: string): Promise<Record<string, File | string>> {
  let form: Awaited<ReturnType<Response['formData']>>
  try {
    form = await new Response(bytes, { headers: { 'content-type': contentType } }).formData()
  } catch {
    throw badRequest('The request body is not valid multipart/form-data')
  }
  const fields: Record<string, File | string> = {}
  for (const [name, value] of form.entries() as Iterable<[string, File | string]>) {
    if (!(name in fields)) fields[name] = value
  }
  return fields
}

const isJson = (contentType: string) => contentType === 'application/json' || contentType.endsWith('+json')

/**
 * The request body as the route's validation expects it, read under the route's limit: JSON for a
 * JSON content type (refused when malformed or nested too deep), the text for any other type
 * (which the route's schema then refuses), null when there is none: never undefined, which would
 * send Elysia on to its own parsers and read the body a second time.
 */
export async function parseBody(request: Request, limit: BodyLimit): Promise<unknown> {
  const bytes = await readBody(request, limit)
  if (!bytes || bytes.byteLength === 0) return null
  const contentType = request.headers.get('content-type') ?? ''
  const mediaType = contentType.split(';', 1)[0]!.trim().toLowerCase()
  if (mediaType === 'multipart/form-data') return formFields(bytes, contentType)
  if (!isJson(mediaType)) return new TextDecoder().decode(bytes)
  if (nestsDeeperThan(bytes, MAX_JSON_DEPTH)) throw badRequest(`The request body nests deeper than ${MAX_JSON_DEPTH} levels`)
  try {
    return JSON.parse(new TextDecoder().decode(bytes))
  } catch {
    throw badRequest('The request body is not valid JSON')
  }
}
