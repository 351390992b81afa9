import { parseAgent, isHarness, type Harness } from '../domain/harness'
import { and, eq, inArray, sql } from 'drizzle-orm'
import type { Db } from '../db/client'
import { sessions } from '../db/schema'
import { ApiError, badRequest, unprocessable } from '../domain/errors'
import { STATUS_GROUPS, type PersistenceMode, type RunMode } from '../domain/status'
import type { KeyPrincipal } from '../identity/service'
import { type Catalog, type HarnessVersions, modelFor, offersMode } from '../catalog/catalog'
import { outputSchemaProblem } from '../catalog/output-schema'
import type { CreateSessionBody } from './model'

/** What a session is started with, once every create rule passed. */
export interface RunSpec {
  agent: string
  harness: Harness
  versionRequested: string | null
  /** The bundled version, or the pin as written until npm resolves it (a dist-tag, say). */
  versionResolved: string
  /** True when the pin names a version other than the bundled one, to fetch from npm. */
  pinned: boolean
  prompt: string
  title: string
  model: string
  requestedModel: string | null
  effort: string | null
  speed: string | null
  mode: RunMode
  persistence: PersistenceMode
  baseBranch: string | null
  onPr: number | null
  outputSchema: Record<string, unknown> | null
}

export const MAX_PROMPT_BYTES = 256 * 1024
/** A semver version or an npm dist-tag; never a URL or path npm would also accept. */
const VERSION_FORM = /^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$/

export function titleOf(prompt: string): string {
  const firstLine = prompt.trim().split('\n', 1)[0] ?? ''
  return firstLine.length > 80 ? firstLine.slice(0, 80) : firstLine
}

/**
 * Applies the create rules of spec 4.1 (shape A) that do not need the database. `defaultAgent`
 * is used when the body names none (a Project run); a `_` run must name one.
 */
/** A prompt or follow-up over MAX_PROMPT_BYTES is a 400 CONTENT_TOO_LARGE, naming the field. */
export function assertPromptSize(field: string, text: string): void {
  if (new TextEncoder().encode(text).length > MAX_PROMPT_BYTES) throw badRequest(`${field} is larger than 256 KiB`, 'CONTENT_TOO_LARGE')
}

export function runSpecOf(body: CreateSessionBody, catalog: Catalog, runnable: HarnessVersions, projectless: boolean): RunSpec {
  if (typeof body.prompt !== 'string' || body.prompt.trim() === '') throw badRequest('prompt is required')
  assertPromptSize('prompt', body.prompt)
  if (body.agent === undefined && projectless) throw badRequest('agent is required for a run without a Project (_)')
  const agent = body.agent ?? 'harness_1'
  const { harness, version } = parseAgent(agent)
  if (!isHarness(harness)) {
    throw unprocessable(`unsupported agent "${agent}"; use harness_1, harness_2 or harness_3`, 'UNSUPPORTED_AGENT', 'error_code')
  }

  const harnessRow = catalog.harnesses.find((h) => h.id === harness)!
  const modelId = body.model ?? harnessRow.default_model
  const model = modelFor(catalog, harness, modelId)
  if (!model) throw unprocessable(`model "${modelId}" is not offered for ${harness}`, 'MODEL_UNSUPPORTED', 'error_code')
  if (body.effort !== undefined && !model.effort.includes(body.effort)) {
    throw badRequest(`effort "${body.effort}" is not offered for model ${model.id} (offered: ${model.effort.join(', ')})`)
  }
  if (body.speed === 'fast') {
    if (harness === 'harness_3') throw badRequest('speed "fast" is not available on harness_3')
    if (!offersMode(model, harness, 'fast')) throw badRequest(`speed "fast" is not offered for model ${model.id} on ${harness}`)
  }
  if (body.base_branch !== undefined && body.on_pr !== undefined) throw badRequest('base_branch and on_pr cannot be used together')
  if (body.output_schema !== undefined) {
    if (harness === 'harness_3') {
      throw unprocessable('output_schema is not supported on harness_3', 'FIELD_UNSUPPORTED_FOR_HARNESS', 'error_code')
    }
    const problem = outputSchemaProblem(body.output_schema)
    if (problem) throw badRequest(problem, 'OUTPUT_SCHEMA_INVALID')
  }
  // Availability last, so a caller learns about every rule of the body first.
  const installed = runnable[harness]
  if (!installed) throw unprocessable(`${harness} is not available on this server`, 'UNSUPPORTED_AGENT', 'error_code')
  // Another version is fetched from npm (harness-install.ts); here only its form is checked.
  if (version !== null && !VERSION_FORM.test(version)) {
    throw unprocessable(`${agent}: "${version}" is not a version or dist-tag of the ${harness} CLI`, 'UNSUPPORTED_AGENT', 'error_code')
  }

  return {
    agent,
    harness,
    versionRequested: version,
    versionResolved: version ?? installed,
    pinned: version !== null && version !== installed,
    prompt: body.prompt,
    title: titleOf(body.prompt),
    model: model.id,
    requestedModel: body.model ?? null,
    effort: body.effort ?? null,
    speed: body.speed ?? null,
    mode: body.mode ?? 'headless',
    persistence: body.persistence ?? 'resumable',
    baseBranch: body.base_branch ?? null,
    onPr: body.on_pr ?? null,
    outputSchema: body.output_schema ?? null,
  }
}

/**
 * 429 RATE_LIMITED when the key already has `max_concurrent` runs in progress (spec 8).
 * Synchronous, so the caller can insert the session before anything else runs.
 */
export function assertKeySlot(db: Db, key: KeyPrincipal): void {
  const running = db
    .select({ n: sql<number>`count(*)` })
    .from(sessions)
    .where(and(eq(sessions.apiKeyId, key.id), inArray(sessions.status, [...STATUS_GROUPS.inProgress])))
    .get()
  if ((running?.n ?? 0) >= key.maxConcurrent) {
    throw new ApiError('rate_limited', `This API key already has ${key.maxConcurrent} runs in progress (max_concurrent)`, 'RATE_LIMITED')
  }
}
