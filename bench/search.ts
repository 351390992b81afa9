/**
 * Search benchmark (issue 7): seeds 100,000 sessions with realistic transcripts into a temp
 * DATA_DIR (straight into the tables, so the full-text triggers run as in production: the seeding
 * figure is the live write path, one index row per message, not a bulk load), then prints
 * p50/p95 of in-process `GET /o/{org}/sessions` requests (routing, auth, validation, query, JSON)
 * for: a list page, a 2-term `q`, `count=true` with filters, a prefix selector, and the pages of
 * 50-page cursor walks. Goals: every p95 under 25 ms; seeding at 20,000 sessions/s or more.
 * Prints figures, never asserts.
 *
 *   bun bench/search.ts          BENCH_SESSIONS=100000 BENCH_SAMPLES=200 BENCH_KEEP=1 (keep the data dir)
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../sandbox/process'
import { loadConfig } from '../src/config'
import type { Database } from 'bun:sqlite'
import { openDb } from '../src/db/client'
import { startServices } from '../src/server'
import { seedSessions, type SeedEvent, type SeedSession } from '../test/helpers/seed-sessions'

const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 100_000)
const SAMPLES = Number(process.env.BENCH_SAMPLES ?? 200)
const BATCH = 1_000
const P95_GOAL_MS = 25
const SEED_GOAL = 20_000
const DAY = 86_400_000

// ---------------------------------------------------------------- realistic text (seeded PRNG)

let state = 0x9e3779b9
function random(): number {
  // mulberry32: reproducible data, so runs compare.
  state = (state + 0x6d2b79f5) | 0
  let t = Math.imul(state ^ (state >>> 15), 1 | state)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}
/** Zipf-like pick: early entries are much more common, as words are in real text. */
const pick = <T>(list: readonly T[]): T => list[Math.floor(list.length * random() ** 2)]!
const int = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1))

const COMPONENT = [
  'login',
  'auth',
  'checkout',
  'billing',
  'search',
  'session',
  'upload',
  'webhook',
  'invoice',
  'scheduler',
  'cache',
  'notification',
  'dashboard',
  'settings',
  'onboarding',
  'export',
  'payment',
  'subscription',
  'profile',
  'audit log',
  'rate limiter',
  'feature flag',
  'permissions',
  'email digest',
  'report builder',
]
const TECH = [
  'postgres',
  'redis',
  'react',
  'typescript',
  'docker',
  'kubernetes',
  'graphql',
  'kafka',
  'terraform',
  's3',
  'stripe',
  'oauth',
  'jwt',
  'sqlite',
  'elasticsearch',
  'grpc',
  'websocket',
  'nginx',
  'prisma',
  'vite',
]
const PROBLEM = [
  'is flaky on CI',
  'times out under load',
  'returns a 500 for empty input',
  'leaks memory after a deploy',
  'double-charges on retry',
  'drops events when the queue is full',
  'shows stale data after logout',
  'breaks on Safari',
  'ignores the timezone',
  'fails when the token expires',
  'is slow for large accounts',
  'logs secrets in plain text',
]
const FILE = [
  'src/auth/session.ts',
  'src/billing/invoice.ts',
  'src/api/routes.ts',
  'web/components/Checkout.tsx',
  'src/db/migrations',
  'src/workers/webhook.ts',
  'test/e2e/login.spec.ts',
  'src/search/index.ts',
  'infra/main.tf',
  'src/cache/redis.ts',
  'src/lib/retry.ts',
  'docker-compose.yml',
]
const CAUSE = [
  'a race between the two writes',
  'a missing index on the lookup column',
  'the retry loop not backing off',
  'an unawaited promise',
  'the cache key ignoring the tenant',
  'an off-by-one in the pagination cursor',
  'the connection pool being exhausted',
  'a stale mock in the fixture',
  'a timezone conversion done twice',
  'the webhook signature check using the raw body',
]

const PROMPTS = [
  () => `Fix the ${pick(COMPONENT)} bug: it ${pick(PROBLEM)}. Start with ${pick(FILE)}.`,
  () => `Add ${pick(TECH)} support to the ${pick(COMPONENT)} service and cover it with tests.`,
  () => `Investigate why the ${pick(COMPONENT)} flow ${pick(PROBLEM)} since we moved to ${pick(TECH)}.`,
  () => `Refactor ${pick(FILE)} so the ${pick(COMPONENT)} logic no longer depends on ${pick(TECH)}.`,
  () => `Upgrade ${pick(TECH)} to the latest major version and fix whatever breaks in ${pick(COMPONENT)}.`,
  () => `Write a migration that backfills the ${pick(COMPONENT)} table, then make the ${pick(COMPONENT)} page use it.`,
]
const SAYS = [
  () => `I'll start by reading ${pick(FILE)} to see how ${pick(COMPONENT)} talks to ${pick(TECH)}.`,
  () => `The failure comes from ${pick(CAUSE)}. I'll fix that and add a regression test.`,
  () => `Running the ${pick(COMPONENT)} tests: ${int(3, 80)} passed, ${int(0, 4)} failed.`,
  () => `${pick(FILE)} already handles the ${pick(COMPONENT)} case, so the bug must be in ${pick(FILE)}.`,
  () => `Done. The ${pick(COMPONENT)} flow no longer ${pick(PROBLEM).replace(/^is /, 'is ')}; I changed ${pick(FILE)} and added a test.`,
]

/** What a short run streams: init, 1–3 rounds of text and a shell call, the final text, the result. */
function transcript(prompt: string): SeedEvent[] {
  const events: SeedEvent[] = [{ type: 'init', model: 'scripted' }]
  const rounds = int(1, 3)
  for (let i = 0; i < rounds; i++) {
    events.push({ type: 'message', role: 'assistant', content: pick(SAYS)() })
    const command = `npm test -- ${pick(FILE)}`
    events.push({ type: 'tool_use', tool: 'Bash', command, callId: `c${i}`, args: { command } })
    events.push({ type: 'tool_result', callId: `c${i}`, output: `${int(3, 80)} passing`, success: true })
  }
  events.push({ type: 'message', role: 'assistant', content: `${pick(SAYS)()}\nSummary: ${prompt.slice(0, 60)}` })
  events.push({ type: 'result', success: true })
  return events
}

// ---------------------------------------------------------------- helpers

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits })
function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!
}
function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)))
  const line = (r: string[]) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ')
  return [line(rows[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.slice(1).map(line)].join('\n')
}

// ---------------------------------------------------------------- setup and seeding

const dir = mkdtempSync(join(tmpdir(), 'agentd-bench-search-'))
const config = loadConfig({ DATA_DIR: dir })
const services = await startServices(config, { driver: new ProcessDriver(), log: () => {} })
await services.ready
const org = services.identity.createOrg('bench')
const users = Array.from({ length: 12 }, (_, i) =>
  services.identity.createUser('bench', `dev${i}@bench.test`, i === 0 ? 'admin' : 'member'),
)
const projects = ['web', 'api', 'mobile', 'infra', 'data', 'docs'].map((name) =>
  services.identity.createProject('bench', name, `bench/${name}`),
)
const auth = { authorization: `Bearer ${users[0]!.token}` }
const seeder = openDb(config.dbPath)

const STATUSES = ['completed', 'completed', 'completed', 'completed', 'failed', 'needs_review', 'cancelled', 'input_required', 'expired']
const HARNESSES = ['harness_1', 'harness_1', 'harness_2', 'harness_3']

/** Sessions seeded into a database without the search triggers and indexes, for scale. */
const CALIBRATION = Math.min(SESSIONS, 20_000)

/**
 * Seeds `count` sessions spread over the past year, oldest first, in batches; times only the
 * inserts. `firstRate` is the rate over the first CALIBRATION sessions (a database slows as it grows).
 */
function seed(sqlite: Database, count: number) {
  const start = Date.now() - 365 * DAY
  const step = (365 * DAY) / count
  const ids: string[] = []
  const titles: string[] = []
  let insertMs = 0
  let firstRate = 0
  let events = 0
  for (let done = 0; done < count; done += BATCH) {
    const batch: SeedSession[] = []
    for (let i = done; i < Math.min(count, done + BATCH); i++) {
      const project = random() < 0.85 ? pick(projects) : null
      const prompt = pick(PROMPTS)()
      const harness = pick(HARNESSES)
      const createdAt = Math.floor(start + i * step)
      const transcriptEvents = transcript(prompt)
      events += transcriptEvents.length + 4
      batch.push({
        orgId: org.id,
        projectId: project?.id ?? null,
        startedByUserId: pick(users).id,
        prompt,
        harness,
        agent: harness,
        model: harness === 'harness_3' ? 'gemini-2.5-pro' : pick(['scripted', 'claude-sonnet-4-5', 'gpt-5']),
        mode: random() < 0.9 ? 'headless' : 'interactive',
        status: pick(STATUSES),
        repoOwner: project ? 'bench' : null,
        repoName: project?.name ?? null,
        summary: `Done: ${prompt.slice(0, 120)}`,
        inputTokens: int(2_000, 400_000),
        outputTokens: int(200, 40_000),
        totalCostUsd: Math.round(random() * 400) / 100,
        toolCallsCount: int(0, 30),
        createdAt,
        completedAt: createdAt + int(20_000, 3_600_000),
        events: transcriptEvents,
      })
    }
    const t0 = performance.now()
    ids.push(...seedSessions(sqlite, batch))
    insertMs += performance.now() - t0
    if (firstRate === 0 && done + batch.length >= CALIBRATION) firstRate = (done + batch.length) / (insertMs / 1000)
    if (titles.length < 50) titles.push(batch[0]!.prompt.slice(0, 80))
  }
  return { ids, titles, events, rate: count / (insertMs / 1000), firstRate, seconds: insertMs / 1000 }
}

try {
  console.log(`agentd bench/search: Bun ${Bun.version}, ${navigator.hardwareConcurrency} CPUs, ${fmt(SESSIONS)} sessions, data in ${dir}`)
  const { ids, titles, events, rate, firstRate, seconds } = seed(seeder.sqlite, SESSIONS)
  console.log(
    `seeded ${fmt(SESSIONS)} sessions and ${fmt(events)} events (search index kept in step by its triggers): ` +
      `${fmt(rate)} sessions/s (${fmt(seconds, 1)} s) — goal >= ${fmt(SEED_GOAL)}: ${rate >= SEED_GOAL ? 'goal met' : 'goal missed'}`,
  )
  // For scale: the same rows into databases without the search triggers and indexes, and without
  // any secondary index or trigger (what the rows and their keys alone cost: a floor no index design can beat).
  const without = (name: string, like: string) => {
    const bare = openDb(join(dir, `${name}.db`))
    bare.sqlite.run('INSERT INTO orgs (id, slug, created_at) VALUES (?, ?, ?)', [org.id, 'bench', Date.now()])
    const objects = bare.sqlite.query<{ type: string; name: string }, [string]>(
      "SELECT type, name FROM sqlite_master WHERE name LIKE ? AND type IN ('trigger', 'index') AND sql IS NOT NULL",
    )
    for (const { type, name } of objects.all(like)) bare.sqlite.run(`DROP ${type} ${name}`)
    bare.sqlite.run('PRAGMA foreign_keys = OFF') // no users or projects in this database
    const { rate } = seed(bare.sqlite, CALIBRATION)
    bare.close()
    return rate
  }
  const noSearch = without('no-search', '%search%')
  const rowsOnly = without('rows-only', '%')
  console.log(
    `  (for scale, the first ${fmt(CALIBRATION)} sessions: ${fmt(firstRate)} sessions/s; the same rows without the search ` +
      `triggers and indexes: ${fmt(noSearch)} sessions/s; the rows and their keys alone, no secondary index or trigger: ${fmt(rowsOnly)} sessions/s)`,
  )
  seeder.sqlite.exec('PRAGMA optimize')

  // -------------------------------------------------------------- latency
  async function get(path: string, expect: number[] = [200]) {
    const t0 = performance.now()
    const res = await services.app.handle(new Request(`http://localhost${path}`, { headers: auth }))
    const body = (await res.json()) as Record<string, any>
    const ms = performance.now() - t0
    if (!expect.includes(res.status)) throw new Error(`${path} answered ${res.status}: ${JSON.stringify(body).slice(0, 300)}`)
    return { ms, body }
  }
  async function measure(name: string, path: () => string, expect: number[] = [200]) {
    for (let i = 0; i < 20; i++) await get(path(), expect)
    const times: number[] = []
    let note = ''
    for (let i = 0; i < SAMPLES; i++) {
      const { ms, body } = await get(path(), expect)
      times.push(ms)
      if (i === 0)
        note =
          body.count !== undefined && body.count !== null
            ? `count ${fmt(body.count)}`
            : Array.isArray(body.sessions)
              ? `${body.sessions.length} rows`
              : body.candidates
                ? `${body.candidates.length} candidates`
                : 'one session'
    }
    return [
      name,
      fmt(percentile(times, 50), 2),
      fmt(percentile(times, 95), 2),
      note,
      percentile(times, 95) < P95_GOAL_MS ? 'goal met' : 'goal missed',
    ]
  }
  const pairs = [
    ['flaky', 'login'],
    ['postgres', 'migration'],
    ['race', 'webhook'],
    ['timezone', 'invoice'],
    ['redis', 'cache'],
    ['retry', 'stripe'],
    ['memory', 'deploy'],
    ['safari', 'checkout'],
  ]
  const filters = [
    'harness=harness_1&status=completed&since=30d',
    'project=web&mode=headless&since=90d',
    'status=failed&model=gpt-5',
    'repo=bench/api&harness=harness_2',
    'since=7d&until=1d',
  ]
  let n = 0
  const rows = [
    ['GET /o/bench/sessions?…', 'p50 ms', 'p95 ms', 'result', `p95 < ${P95_GOAL_MS} ms`],
    await measure('list page (limit 50)', () => '/o/bench/sessions'),
    await measure('2-term q', () => {
      const [a, b] = pairs[n++ % pairs.length]!
      return `/o/bench/sessions?q=${a}&q=${b}`
    }),
    await measure('count=true with filters', () => `/o/bench/sessions?count=true&${filters[n++ % filters.length]}`),
    await measure('prefix selector (8 chars)', () => `/o/bench/sessions?selector=${ids[Math.floor(random() * ids.length)]!.slice(0, 8)}`),
    await measure(
      '(also) title selector',
      () => `/o/bench/sessions?selector=${encodeURIComponent(titles[Math.floor(random() * titles.length)]!)}`,
      [200, 409],
    ),
    await measure('(also) 2-term q, status=failed', () => {
      const [a, b] = pairs[n++ % pairs.length]!
      return `/o/bench/sessions?q=${a}&q=${b}&status=failed`
    }),
    await measure('(also) count=true with q', () => `/o/bench/sessions?count=true&q=${pairs[n++ % pairs.length]![0]}`),
    await measure('(also) sort=cost, page 1', () => '/o/bench/sessions?sort=cost'),
    await measure('(also) sort=duration&status=failed', () => '/o/bench/sessions?sort=duration&status=failed'),
  ]
  // Pages of full 50-page walks (the first page included), newest first.
  const walks = Math.max(1, Math.ceil(SAMPLES / 50))
  const pages: number[] = []
  const walkTotals: number[] = []
  for (let w = 0; w < walks + 1; w++) {
    let cursor: string | null = null
    let total = 0
    for (let p = 0; p < 50; p++) {
      const { ms, body } = await get(`/o/bench/sessions?limit=50${cursor ? `&cursor=${cursor}` : ''}`)
      if (w > 0) pages.push(ms)
      total += ms
      cursor = body.next_cursor
    }
    if (w > 0) walkTotals.push(total)
  }
  const p95 = percentile(pages, 95)
  rows.push([
    '50-page cursor walk, per page',
    fmt(percentile(pages, 50), 2),
    fmt(p95, 2),
    `${walks} walks, ${fmt(percentile(walkTotals, 50))} ms each`,
    p95 < P95_GOAL_MS ? 'goal met' : 'goal missed',
  ])
  console.log(`\n${table(rows)}`)
} finally {
  seeder.close()
  await services.close()
  if (process.env.BENCH_KEEP) console.log(`kept ${dir}`)
  else rmSync(dir, { recursive: true, force: true })
}
