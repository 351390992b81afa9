/**
 * The org-wide search's query helpers: times (`since`, `until`), cursors and FTS5 phrases.
 */
import { badRequest } from '../domain/errors'

/** Orders of the org-wide search; each is newest first among equals. */
export const SEARCH_SORTS = ['recent', 'cost', 'duration'] as const
export type SearchSort = (typeof SEARCH_SORTS)[number]

const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const
const RELATIVE = /^(\d{1,9})([smhdw])$/
const ISO = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2})?)?$/i

/** `since` / `until` as epoch ms: `2h` is two hours before `now`; an ISO time without offset is UTC. */
export function parseTime(name: string, value: string, now: number): number {
  const relative = RELATIVE.exec(value)
  if (relative) return now - Number(relative[1]) * UNIT_MS[relative[2] as keyof typeof UNIT_MS]
  const iso = ISO.exec(value)
  if (iso) {
    const hasTime = value.length > 10
    const ms = Date.parse(hasTime && !iso[1] ? `${value.replace(' ', 'T')}Z` : value.replace(' ', 'T'))
    if (Number.isFinite(ms)) return ms
  }
  throw badRequest(`${name} must be a relative time such as 2h or 7d, or an ISO 8601 time; got "${value}"`)
}

/** Where a page ended: the sort it belongs to and the last row's position in that order. */
export interface Cursor {
  sort: SearchSort
  /** The last row's sort value: created_at (recent), cost in USD (cost), or duration in ms, -1 for none (duration). */
  value: number
  /** The last row's search key (creation order), the tie-breaker of every sort. */
  key: number
}

const CURSOR_VERSION = 1

export function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify([CURSOR_VERSION, cursor.sort, cursor.value, cursor.key])).toString('base64url')
}

/** Parses a `next_cursor`; a damaged one, or one from another `sort`, is a 400. */
export function decodeCursor(value: string, sort: SearchSort): Cursor {
  let parts: unknown
  try {
    parts = JSON.parse(Buffer.from(value, 'base64url').toString('utf8'))
  } catch {
    parts = null
  }
  if (
    Array.isArray(parts) &&
    parts.length === 4 &&
    parts[0] === CURSOR_VERSION &&
    (SEARCH_SORTS as readonly unknown[]).includes(parts[1]) &&
    Number.isFinite(parts[2]) &&
    Number.isSafeInteger(parts[3])
  ) {
    if (parts[1] !== sort) throw badRequest(`cursor belongs to sort=${parts[1]}, not sort=${sort}`)
    return { sort, value: parts[2], key: parts[3] }
  }
  throw badRequest('cursor is not a next_cursor this server returned')
}

/**
 * One `q` value as an FTS5 phrase: its words in order, matched case- and accent-insensitively.
 * Null when it holds no word at all (it then constrains nothing).
 */
export function ftsPhrase(value: string): string | null {
  if (!/[\p{L}\p{N}]/u.test(value)) return null
  return `"${value.replaceAll('"', '""')}"`
}
