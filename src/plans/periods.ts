/**
 * The plan periods of contract section 9, in UTC: tokens, compute minutes and spend count per
 * calendar month, weekly compute minutes per ISO week (Monday 00:00 to Monday 00:00).
 */

/** The start (ms) of the calendar month `at` falls in. */
export function monthStart(at: number): number {
  const d = new Date(at)
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1)
}

/** The start (ms) of the ISO week `at` falls in: the Monday before it, or its own if a Monday. */
export function isoWeekStart(at: number): number {
  const d = new Date(at)
  const sinceMonday = (d.getUTCDay() + 6) % 7
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() - sinceMonday)
}
