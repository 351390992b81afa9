import { describe, expect, test } from 'bun:test'
import { EFFORTS, type Effort } from '../../src/domain/harness'
import { buildTurn as claudeTurn } from '../../src/harness/claude'
import { buildTurn as codexTurn } from '../../src/harness/codex'
import { buildTurn as geminiTurn } from '../../src/harness/gemini'
import type { TurnSpec } from '../../src/harness/harness'

const spec: TurnSpec = { prompt: 'hi', model: 'scripted', home: '/home/agent', workspace: '/workspace' } as TurnSpec

const claudeEffort = (effort: string) => {
  const argv = claudeTurn({ ...spec, effort }).argv
  const at = argv.indexOf('--effort')
  return at < 0 ? null : argv[at + 1]
}
const codexEffort = (effort: string) =>
  /model_reasoning_effort = "(\w+)"/.exec(codexTurn({ ...spec, effort }).files!['.codex/config.toml'] as string)?.[1] ?? null
const geminiLevel = (effort: string) => {
  const settings = JSON.parse(geminiTurn({ ...spec, effort }).files!['.gemini/settings.json'] as string)
  return settings.modelConfigs?.customOverrides[0].modelConfig.generateContentConfig.thinkingConfig.thinkingLevel ?? null
}

describe('each CLI gets the level nearest to the catalog effort', () => {
  // Every catalog level, in order, against what each CLI accepts; `auto` leaves the CLI's default.
  const expected: Record<Effort, [string | null, string | null, string | null]> = {
    none: ['low', 'minimal', 'LOW'],
    minimal: ['low', 'minimal', 'LOW'],
    low: ['low', 'low', 'LOW'],
    medium: ['medium', 'medium', 'MEDIUM'],
    high: ['high', 'high', 'HIGH'],
    xhigh: ['xhigh', 'xhigh', 'HIGH'],
    max: ['max', 'xhigh', 'HIGH'],
    auto: [null, null, null],
  }

  test('the table covers every level', () => expect(Object.keys(expected)).toEqual([...EFFORTS]))

  for (const effort of EFFORTS) {
    test(effort, () => {
      expect([claudeEffort(effort), codexEffort(effort), geminiLevel(effort)]).toEqual(expected[effort])
    })
  }
})
