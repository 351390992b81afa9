/**
 * Attack: past the raw transcript cap, the sandbox keeps the CLI's stdout full of well-formed
 * events (assistant messages of 4 KiB each, written straight into the stream agentd parses), so
 * that each is parsed and stored as an event: the database and the host disk would fill for as
 * long as the turn lasts. Contract section 11: one turn stores at most AGENTD_TRANSCRIPT_MAX_MB of
 * events; past it capture is `partial` and later events are counted, not stored.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { TestApp } from '../helpers/app'
import { caller, ISOLATING, runSession, securityApp, toCliStdout } from './helpers'

const MiB = 1024 * 1024
/** AGENTD_TRANSCRIPT_MAX_MB of the app: 1 MiB. */
const CAP_BYTES = MiB
/** 2,000 assistant messages of 4 KiB each: 8 MiB of events, eight times the cap. */
const MESSAGES = 2000
const MESSAGE = `{"type":"assistant","message":{"id":"m","type":"message","role":"assistant","model":"scripted","content":[{"type":"text","text":"${'x'.repeat(4096)}"}]}}`
const FLOOD = `perl -e 'print "${MESSAGE.replaceAll('"', '\\"')}\\n" x ${MESSAGES}'`

for (const kind of ISOLATING) {
  describe(`event flood on ${kind}`, () => {
    let t: TestApp
    beforeAll(async () => {
      t = await securityApp(kind, { AGENTD_TRANSCRIPT_MAX_MB: '1' })
    }, 60_000)
    afterAll(async () => t?.[Symbol.asyncDispose](), 60_000)

    test('8 MiB of well-formed events in one turn: at most AGENTD_TRANSCRIPT_MAX_MB of them stored, capture partial, the rest counted', async () => {
      const view = await runSession(t, [{ bash: toCliStdout(FLOOD) }, { answer: 'flooded' }])
      const events = t.store.allEvents(view.execution_id).filter((e) => e.kind === 'harness' && e.turn === 1)
      const storedBytes = events.reduce((sum, e) => sum + JSON.stringify(e.data).length, 0)
      const floods = events.filter((e) => e.type === 'message' && String(e.data.content ?? '').startsWith('xxxx'))
      console.log(
        `event flood on ${kind}: ${events.length} events stored (${(storedBytes / MiB).toFixed(2)} MiB), ${floods.length} of the ${MESSAGES} flood messages`,
      )
      // Some got in before the cap; far from all of them.
      expect(floods.length).toBeGreaterThan(0)
      expect(floods.length).toBeLessThan(MESSAGES / 4)
      expect(storedBytes).toBeLessThanOrEqual(CAP_BYTES + 64 * 1024)
      expect(view.session_capture).toBe('partial')
      // The turn still ended as the CLI said (the model's answer is kept apart from the stored events).
      expect(['completed', 'failed']).toContain(view.status)
      // What was not stored is counted, in the turn's own transcript.
      const counted = events.find(
        (e) => e.type === 'error' && /^agentd: \d+ events of this turn were not stored/.test(String(e.data.content)),
      )
      expect(counted, 'a line counting the events not stored').toBeDefined()
      expect(Number(/^agentd: (\d+) events/.exec(String(counted!.data.content))![1])).toBeGreaterThan(MESSAGES / 2)
      const messages = await caller(t)('GET', `/o/acme/p/_/sessions/${view.execution_id}/messages`)
      expect(messages.status).toBe(200)
    }, 120_000)
  })
}
