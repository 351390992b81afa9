/**
 * Event ingest and fan-out (issue "Live sessions"): harness events appended at a steady rate to
 * one session, group-committed to SQLite, and streamed as SSE frames to 100 subscribers.
 * Prints events/s written and delivered, the transactions/s that took, and p50/p99 latency from
 * append to a subscriber's frame. Figures only; a missed goal is printed, never asserted.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { initialTransition } from 'xstate'
import { SESSION_MACHINE_VERSION, sessionMachine } from '../machines/session.machine'
import { openDb } from '../src/db/client'
import { IdentityService } from '../src/identity/service'
import { SessionStore } from '../src/session-record/store'
import { sseStream } from '../src/sessions/sse'
import { followSession } from '../src/sessions/stream'

const SUBSCRIBERS = 100
const RATE = 20_000 // events per second offered
const SECONDS = 3
const TICK_MS = 2
const TYPES = ['message', 'tool_use', 'tool_result', 'thinking'] as const

const dir = mkdtempSync(join(tmpdir(), 'agentd-bench-events-'))
const { db, close } = openDb(join(dir, 'agentd.db'), { backgroundCheckpoint: true })
const identity = new IdentityService(db)
const org = identity.createOrg('bench')
const store = new SessionStore(db, Date.now)
const id = crypto.randomUUID()
const [snapshot] = initialTransition(sessionMachine, { persistence: 'resumable', mode: 'headless', hasSchema: false })
const now = Date.now()
store.insert(
  {
    id,
    orgId: org.id,
    agent: 'harness_1',
    harness: 'harness_1',
    status: 'running',
    mode: 'headless',
    persistenceMode: 'resumable',
    prompt: 'bench',
    title: 'bench',
    model: 'scripted',
    createdAt: now,
    updatedAt: now,
  },
  sessionMachine.getPersistedSnapshot(snapshot),
  SESSION_MACHINE_VERSION,
  [],
)

// Subscribers: real SSE streams, each read by its own loop that parses the frame's timestamp.
const latencies: number[] = []
let delivered = 0
const bytes = new Array<number>(SUBSCRIBERS).fill(0)
const decoder = new TextDecoder()
// Subscriber 0 parses every frame for its latency; the others only count bytes, as a socket
// would, so the bench's own parsing does not stand in for the server's work.
const started = performance.now()
const readers = Array.from({ length: SUBSCRIBERS }, async (_, i) => {
  const stream = sseStream(followSession(store, id, { afterSeq: 0, keepaliveMs: 15_000 }))
  const reader = stream.getReader()
  for (;;) {
    const { value, done } = await reader.read()
    if (done) return
    bytes[i]! += value.length
    if (i !== 0) continue
    const at = performance.now()
    for (const match of decoder.decode(value).matchAll(/"t":([0-9.]+)/g)) {
      delivered++
      // The first half second warms the JIT up; it is not what a running server sees.
      if (Number(match[1]) - started > 500) latencies.push(at - Number(match[1]))
    }
  }
})

const total = RATE * SECONDS
const perTick = (RATE * TICK_MS) / 1000
const txBefore = store.events.transactions
let appended = 0
while (appended < total) {
  const due = Math.min(total, Math.floor(((performance.now() - started) / 1000) * RATE) + perTick)
  const batch = []
  for (; appended < due; appended++) {
    // A turn's usual mix: a quarter are messages (full-text indexed), the rest tool traffic.
    const type = TYPES[appended % TYPES.length]!
    batch.push({
      turn: 1,
      kind: 'harness' as const,
      type,
      data: {
        type,
        agent: 'harness_1',
        role: 'assistant',
        content: `event ${appended} of a realistic length, a line of text`,
        t: performance.now(),
      },
    })
  }
  if (batch.length) store.events.append(id, batch)
  await Bun.sleep(TICK_MS)
}
store.events.flush()
const ingestSeconds = (performance.now() - started) / 1000
const deadline = performance.now() + 10_000
while ((delivered < total || bytes.some((b) => b !== bytes[0])) && performance.now() < deadline) await Bun.sleep(10)
const wall = (performance.now() - started) / 1000
const transactions = store.events.transactions - txBefore

// Capacity: how fast events can be appended and made durable (batches of one stdout read each).
const capacityId = crypto.randomUUID()
store.insert(
  {
    id: capacityId,
    orgId: org.id,
    agent: 'harness_1',
    harness: 'harness_1',
    status: 'running',
    mode: 'headless',
    persistenceMode: 'resumable',
    prompt: 'bench',
    title: 'bench',
    model: 'scripted',
    createdAt: now,
    updatedAt: now,
  },
  sessionMachine.getPersistedSnapshot(snapshot),
  SESSION_MACHINE_VERSION,
  [],
)
const CAPACITY_EVENTS = 200_000
const capTx = store.events.transactions
const capStart = performance.now()
for (let i = 0; i < CAPACITY_EVENTS; i += 20) {
  const batch = []
  for (let j = i; j < i + 20; j++) {
    const type = TYPES[j % TYPES.length]!
    batch.push({
      turn: 1,
      kind: 'harness' as const,
      type,
      data: { type, agent: 'harness_1', role: 'assistant', content: `event ${j} of a realistic length, a line of text` },
    })
  }
  store.events.append(capacityId, batch)
  if (i % 2000 === 0) await Bun.sleep(0)
}
store.events.flush()
const capSeconds = (performance.now() - capStart) / 1000
const capacity = CAPACITY_EVENTS / capSeconds
const capTxRate = (store.events.transactions - capTx) / capSeconds

latencies.sort((a, b) => a - b)
const pct = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))] ?? NaN
const ingestRate = total / ingestSeconds
const txRate = transactions / ingestSeconds
const rows: [string, string, string][] = [
  [
    'ingest capacity (written, durable)',
    `${Math.round(capacity).toLocaleString()} /s`,
    capacity >= 20_000 ? 'goal met (≥ 20,000/s)' : 'goal missed (≥ 20,000/s)',
  ],
  ['  transactions at capacity', `${Math.round(capTxRate)} /s`, `${Math.round(capacity / Math.max(1, capTxRate))} events per transaction`],
  ['events written at the offered rate', `${Math.round(ingestRate).toLocaleString()} /s`, ''],
  [
    'events delivered (all subscribers)',
    `${Math.round((delivered * SUBSCRIBERS) / wall).toLocaleString()} /s`,
    bytes.every((b) => b === bytes[0]) && delivered === total
      ? 'every subscriber got every event'
      : `subscriber 0 got ${delivered} of ${total}`,
  ],
  [
    'transactions at 20,000 events/s',
    `${Math.round(txRate)} /s`,
    txRate <= 110 ? 'goal met (≈ 100/s or fewer)' : 'goal missed (≈ 100/s or fewer)',
  ],
  ['delivery latency p50', `${pct(50).toFixed(1)} ms`, ''],
  ['delivery latency p99', `${pct(99).toFixed(1)} ms`, pct(99) < 20 ? 'goal met (< 20 ms)' : 'goal missed (< 20 ms)'],
]
console.log(`events bench: ${SUBSCRIBERS} subscribers, ${RATE.toLocaleString()} events/s offered for ${SECONDS} s`)
for (const [name, value, note] of rows) console.log(`  ${name.padEnd(36)} ${value.padStart(14)}  ${note}`)

close()
rmSync(dir, { recursive: true, force: true })
process.exit(0)
void readers
