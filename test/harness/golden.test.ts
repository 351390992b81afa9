/**
 * Golden transcripts: raw streams captured from the real CLIs (test/fixtures/capture.ts) must
 * normalize to the committed events and outcome, and a stream cut short is a partial capture.
 */
import { describe, expect, test } from 'bun:test'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ADAPTERS } from '../../src/harness'
import type { HarnessEvent, TurnOutcome, TurnSpec } from '../../src/harness/harness'
import { NOW } from '../fixtures/capture-format'

const FIXTURES = join(import.meta.dir, '..', 'fixtures')

interface Golden {
  spec: Partial<TurnSpec>
  exitCode: number
  events: HarnessEvent[]
  outcome: TurnOutcome
}

function load(harness: string, name: string) {
  const raw = readFileSync(join(FIXTURES, harness, `${name}.jsonl`), 'utf8')
  const golden = JSON.parse(readFileSync(join(FIXTURES, harness, `${name}.expected.json`), 'utf8')) as Golden
  const spec: TurnSpec = {
    workspace: '/workspace',
    home: '/home/agent',
    gatewayUrl: 'http://gateway',
    gatewayToken: 't',
    prompt: '',
    model: 'scripted',
    ...golden.spec,
  }
  return { lines: raw.split('\n').filter((l) => l !== ''), golden, spec }
}

/** Parse-time stamps differ per run; they must still be ISO dates. */
function comparable(events: HarnessEvent[], expected: HarnessEvent[]): HarnessEvent[] {
  return events.map((e, i) => {
    if (expected[i]?.timestamp !== NOW) return e
    expect(Number.isNaN(Date.parse(e.timestamp))).toBe(false)
    return { ...e, timestamp: NOW }
  })
}

for (const adapter of Object.values(ADAPTERS)) {
  const names = readdirSync(join(FIXTURES, adapter.id))
    .filter((f) => f.endsWith('.jsonl'))
    .map((f) => f.slice(0, -'.jsonl'.length))

  describe(`${adapter.id} golden transcripts`, () => {
    test('there are fixtures for the acceptance script and a failing model', () => {
      expect(names).toEqual(expect.arrayContaining(['acceptance', 'fail']))
    })

    for (const name of names) {
      test(`${name}: the captured stream normalizes to the committed events and outcome`, () => {
        const { lines, golden, spec } = load(adapter.id, name)
        const parser = adapter.createParser(spec)
        const events = lines.flatMap((line) => parser.push(line))
        expect(comparable(events, golden.events)).toEqual(golden.events)
        expect(parser.finish(golden.exitCode)).toEqual(golden.outcome)
      })
    }

    test('a stream cut off mid-line before its end is a partial capture with no answer', () => {
      const { lines, spec } = load(adapter.id, 'acceptance')
      const parser = adapter.createParser(spec)
      for (const line of lines.slice(0, -3)) parser.push(line)
      const cut = lines.at(-3)!
      expect(parser.push(cut.slice(0, cut.length / 2))).toEqual([])
      const outcome = parser.finish(null)
      expect(outcome).toMatchObject({ capture: 'partial', answerText: null })
      expect(outcome.error).toMatch(/was killed before/)
      expect(outcome.resumeId).not.toBeNull()
    })

    test('a run that printed nothing is a failed capture', () => {
      const parser = adapter.createParser()
      expect(parser.push('not json at all')).toEqual([])
      expect(parser.finish(1)).toMatchObject({ capture: 'failed', answerText: null, toolCalls: 0 })
    })
  })
}
