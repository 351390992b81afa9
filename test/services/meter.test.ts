import { expect, test } from 'bun:test'
import { meterTransition } from '../../src/plans/meter'
import type { SessionRow } from '../../src/session-record/store'

const row = (over: Partial<SessionRow>) =>
  ({ id: 's1', orgId: 'o1', accountId: null, runningSince: null, totalTokens: 100, totalCostUsd: 1, ...over }) as SessionRow

test('a stretch of running is billed when it ends; a turn ending into the next one starts a new stretch', () => {
  const paused = meterTransition({
    row: row({ runningSince: 1_000 }),
    from: 'running',
    to: 'paused',
    turnEnded: false,
    restarted: false,
    patch: {},
    now: 4_000,
  })
  expect(paused).toEqual({ fields: { runningSince: null }, usage: [expect.objectContaining({ computeMs: 3_000, tokens: 0, at: 4_000 })] })
  const next = meterTransition({
    row: row({ runningSince: 1_000 }),
    from: 'running',
    to: 'running',
    turnEnded: true,
    restarted: false,
    patch: { totalTokens: 150, totalCostUsd: 1.5 },
    now: 2_000,
  })
  expect(next).toEqual({
    fields: { runningSince: 2_000 },
    usage: [expect.objectContaining({ computeMs: 1_000, tokens: 50, spendUsd: 0.5 })],
  })
})

test('a restart bills none of a lost stretch, and a turn it starts at once begins a new one', () => {
  const lost = meterTransition({
    row: row({ runningSince: 1_000 }),
    from: 'running',
    to: 'failed',
    turnEnded: true,
    restarted: true,
    patch: {},
    now: 9_000_000,
  })
  expect(lost).toEqual({ fields: { runningSince: null }, usage: [] })
  const queued = meterTransition({
    row: row({ runningSince: 1_000 }),
    from: 'running',
    to: 'running',
    turnEnded: false,
    restarted: true,
    patch: {},
    now: 9_000_000,
  })
  expect(queued).toEqual({ fields: { runningSince: 9_000_000 }, usage: [] })
})

test("a run on the caller's own account bills its compute, never its tokens or spend", () => {
  const own = meterTransition({
    row: row({ runningSince: 1_000, accountId: 'acct_1' }),
    from: 'running',
    to: 'completed',
    turnEnded: true,
    restarted: false,
    patch: { totalTokens: 900, totalCostUsd: 9 },
    now: 2_000,
  })
  expect(own.usage).toEqual([expect.objectContaining({ computeMs: 1_000, tokens: 0, spendUsd: 0 })])
})

test('a stretch across the start of an ISO week and of a month is cut there: each piece counts in its own periods, the tokens with the last', () => {
  // Sunday 29 November 2026 23:30 UTC to Tuesday 1 December 00:45: a new week at Monday 00:00, a new month at Tuesday 00:00.
  const start = Date.UTC(2026, 10, 29, 23, 30)
  const end = Date.UTC(2026, 11, 1, 0, 45)
  const { usage } = meterTransition({
    row: row({ runningSince: start }),
    from: 'running',
    to: 'completed',
    turnEnded: true,
    restarted: false,
    patch: { totalTokens: 130 },
    now: end,
  })
  const monday = Date.UTC(2026, 10, 30)
  const december = Date.UTC(2026, 11, 1)
  expect(usage.map((u) => [u.at, u.computeMs, u.tokens])).toEqual([
    [monday - 1, 30 * 60_000, 0],
    [december - 1, 24 * 3600_000, 0],
    [end, 45 * 60_000, 30],
  ])
  expect(usage.reduce((sum, u) => sum + u.computeMs!, 0)).toBe(end - start)
})
