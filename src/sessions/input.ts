import { ApiError, badRequest, unprocessable } from '../domain/errors'
import type { Principal } from '../identity/service'
import { mimeOf, type AttachmentSource, type FileService } from '../files/service'
import { FetchRefused, FetchTooLarge, type Fetched } from '../egress/public-get'
import { FetchBudget, FetchBudgetSpent, type FetchLimits } from '../egress/fetch-budget'
import { assertPromptSize } from './create-rules'
import type { CreateSessionBody, InputBlock } from './model'

/** All the files of one create together (file blocks, documents, fetched images): what one upload may be. */
export const MAX_ATTACHMENT_BYTES = 32 * 1024 * 1024

/** Fetches an image block's URL under the webhook SSRF rules (egress/public-get.ts), reading at most `maxBytes`, until `signal` fires. */
export type FetchImage = (url: string, maxBytes: number, signal: AbortSignal) => Promise<Fetched>

/** What a shape B `input` becomes: the prompt (its text blocks) and the files to attach, in block order. */
export interface ResolvedInput {
  prompt: string
  attachments: AttachmentSource[]
}

/** Shape B's own fields (spec 4.1), which a shape A body may not carry. */
const SHAPE_B_ONLY = ['harness', 'strategy', 'skills', 'connections', 'agent_id'] as const

/**
 * A create as shape A's fields (shape B's task turned into `prompt`, `harness` into `agent`), the
 * files to attach, and what is left of the create's fetch budget for its skills.
 */
export interface CreateRequest {
  body: CreateSessionBody
  attachments: AttachmentSource[]
  fetches: FetchBudget
}

export interface InputDeps {
  files: FileService
  fetches: {
    get: FetchImage
    /** What a create's caller-named fetches, its images and then its skills, may take together (contract section 11). */
    limits: FetchLimits
  }
}

/**
 * Reads a create body of either shape (contract section 8): `input` is shape B, `prompt` shape A,
 * both or neither 400. A key run's forbidden fields are refused first (422), then shape B's
 * blocks are resolved: fetched (in a budget the create's skills then share), decoded and looked
 * up before anything is stored.
 */
export async function readCreate(principal: Principal, orgId: string, body: CreateSessionBody, deps: InputDeps): Promise<CreateRequest> {
  const hasInput = body.input !== undefined
  if (hasInput === (body.prompt !== undefined))
    throw badRequest(
      hasInput ? 'Send either prompt (shape A) or input (shape B), not both' : 'prompt (shape A) or input (shape B) is required',
    )
  const blocks = hasInput ? blocksOf(body.input!) : []
  refuseKeyFields(principal, body, blocks, hasInput)
  const fetches = new FetchBudget(deps.fetches.limits)
  if (!hasInput) {
    const field = SHAPE_B_ONLY.find((f) => body[f] !== undefined)
    if (field) throw badRequest(`${field} is a shape B field: send the task as input, not prompt`)
    return { body, attachments: [], fetches }
  }
  if (body.agent !== undefined && body.harness !== undefined) throw badRequest('Send either harness or agent, not both')
  const fetchImage = (url: string, maxBytes: number) => fetches.run((signal) => deps.fetches.get(url, maxBytes, signal))
  const { prompt, attachments } = await resolveInput(blocks, principal, orgId, deps.files, fetchImage)
  const { input: _input, harness, strategy: _strategy, ...rest } = body
  return { body: { ...rest, prompt, ...(harness ? { agent: harness } : {}) }, attachments, fetches }
}

/**
 * What a run started with an API key may not send (spec 4.1, contract section 8): a saved agent,
 * skills, connections or sources in either shape; in shape B also an account and any block but text.
 */
function refuseKeyFields(principal: Principal, body: CreateSessionBody, blocks: InputBlock[], shapeB: boolean): void {
  if (!principal.apiKey) return
  const fields = shapeB
    ? (['agent_id', 'skills', 'connections', 'resources', 'account_id'] as const)
    : (['agent_id', 'skills', 'connections', 'resources'] as const)
  const field = fields.find((f) => body[f] !== undefined)
  const block = blocks.findIndex((b) => b.type !== 'text')
  const what = field ?? (block >= 0 ? `input[${block}] (a ${blocks[block]!.type} block)` : null)
  if (what) throw new ApiError('unprocessable', `${what} cannot be used by a run started with an API key`, 'API_KEY_FIELD_UNSUPPORTED')
}

/** `input` as a list of blocks: a string is one text block, one block object a list of one. */
const blocksOf = (input: NonNullable<CreateSessionBody['input']>): InputBlock[] =>
  typeof input === 'string' ? [{ type: 'text', text: input }] : Array.isArray(input) ? input : [input]

/**
 * The prompt and attachments of shape B blocks (spec 4.1): text blocks joined with a blank line
 * (at least one, 256 KiB in all), a document's base64 decoded, a file block's upload looked up,
 * an image's URL fetched. Every error names its block.
 */
async function resolveInput(
  blocks: InputBlock[],
  principal: Principal,
  orgId: string,
  files: FileService,
  fetchImage: BudgetedFetch,
): Promise<ResolvedInput> {
  const texts = blocks.flatMap((b) => (b.type === 'text' ? [b.text] : []))
  if (texts.length === 0 || texts.every((t) => t.trim() === '')) throw badRequest('input needs at least one text block that is not empty')
  const prompt = texts.join('\n\n')
  assertPromptSize('input', prompt)
  const attachments: AttachmentSource[] = []
  // One budget for all of a create's files, a file named twice counted twice: each is written
  // into the sandbox, and held in memory while it is.
  let left = MAX_ATTACHMENT_BYTES
  const take = (source: AttachmentSource, block: number) => {
    left -= source.kind === 'new' ? source.bytes.byteLength : source.size
    if (left < 0) throw tooLarge(block)
    attachments.push(source)
  }
  for (const [i, block] of blocks.entries()) {
    switch (block.type) {
      case 'text':
        break
      case 'document':
        take({ kind: 'new', name: block.name, mime: mimeOf(block.source.media_type), bytes: decodeBase64(block.source.data, i) }, i)
        break
      case 'file':
        take(files.stored(principal, orgId, block.source.file_id, i), i)
        break
      case 'image':
        take(await fetchedImage(block.source.url, i, left, fetchImage), i)
        break
    }
  }
  return { prompt, attachments }
}

/** Strict base64 (line breaks allowed, as MIME writes it); its bytes at most MAX_ATTACHMENT_BYTES. */
function decodeBase64(data: string, block: number): Uint8Array {
  const compact = data.replace(/[\r\n]/g, '')
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 === 1) throw badRequest(`input[${block}]: source.data is not base64`)
  if (Math.floor((compact.length * 3) / 4) > MAX_ATTACHMENT_BYTES + 2) throw tooLarge(block)
  const bytes = Buffer.from(compact, 'base64')
  if (bytes.byteLength > MAX_ATTACHMENT_BYTES) throw tooLarge(block)
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength)
}

const tooLarge = (block: number) =>
  new ApiError('too_large', `input[${block}]: the files of one create are larger than 32 MiB together`, 'PAYLOAD_TOO_LARGE')

/** An image fetch within the create's budget. */
type BudgetedFetch = (url: string, maxBytes: number) => Promise<Fetched>

/**
 * An image block's file: fetched now (at most `maxBytes`), so the run never depends on the URL
 * again. The create's fetch budget running out is 422 SKILL_FETCH_FAILED, as contract section 11
 * says of every caller-named fetch at create.
 */
async function fetchedImage(url: string, block: number, maxBytes: number, fetchImage: BudgetedFetch): Promise<AttachmentSource> {
  let fetched: Fetched
  try {
    fetched = await fetchImage(url, maxBytes)
  } catch (err) {
    if (err instanceof FetchBudgetSpent)
      throw unprocessable(`input[${block}]: the image was not fetched: ${err.message}`, 'SKILL_FETCH_FAILED')
    if (err instanceof FetchTooLarge) throw tooLarge(block)
    const why = err instanceof FetchRefused ? err.message : `the fetch failed (${(err as Error).message})`
    throw unprocessable(`input[${block}]: the image could not be fetched: ${why}`, 'ATTACHMENT_FETCH_FAILED')
  }
  const mime = mimeOf(fetched.contentType ?? '')
  if (!mime.startsWith('image/'))
    throw unprocessable(`input[${block}]: ${url} is not an image (${fetched.contentType ?? 'no content type'})`, 'ATTACHMENT_FETCH_FAILED')
  const last = new URL(url).pathname.split('/').pop() ?? ''
  return { kind: 'new', name: last || `image.${mime.slice('image/'.length).replace(/\W.*$/, '')}`, mime, bytes: fetched.bytes }
}
