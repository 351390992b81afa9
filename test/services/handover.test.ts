import { afterAll, expect, test } from 'bun:test'
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { StoredPrefix, takeHandover, writeHandover, type Handover } from '../../src/runtime/handover'

const root = mkdtempSync(join(tmpdir(), 'agentd-handover-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const handover: Handover = {
  turn: 2,
  ref: 'mbc1x2-0',
  token: 'gw_abcDEF123_-x',
  meter: { input: 10, output: 5, cacheRead: 0, cacheWrite: 0, reasoning: 0, calls: 1, costUsd: 0.01 },
  startedAt: 1_700_000_000_000,
  prompt: 'fix the bug',
}

test("a handover is written for agentd's user only, read once, then gone", () => {
  const state = join(root, 'a')
  writeHandover(state, handover)
  const file = join(state, 'exec', 'handover.json')
  expect(statSync(file).mode & 0o777).toBe(0o600)
  expect(statSync(join(state, 'exec')).mode & 0o777).toBe(0o700)
  expect(takeHandover(state)).toEqual(handover)
  expect(existsSync(file)).toBe(false)
  expect(takeHandover(state)).toBeNull()
})

test('a link in its place is not followed, and a malformed or foreign one is dropped as no handover', () => {
  const state = join(root, 'b')
  mkdirSync(join(state, 'exec'), { recursive: true, mode: 0o700 })
  const target = join(root, 'elsewhere.json')
  writeFileSync(target, JSON.stringify(handover))
  symlinkSync(target, join(state, 'exec', 'handover.json'))
  expect(takeHandover(state)).toBeNull()
  expect(existsSync(target)).toBe(true)
  rmSync(join(state, 'exec', 'handover.json'))
  for (const bad of [
    '{not json',
    JSON.stringify({ ...handover, token: 'sk-other' }),
    JSON.stringify({ ...handover, turn: '2' }),
    JSON.stringify({ ...handover, meter: null }),
  ]) {
    writeFileSync(join(state, 'exec', 'handover.json'), bad)
    expect(takeHandover(state)).toBeNull()
    expect(existsSync(join(state, 'exec', 'handover.json'))).toBe(false)
  }
})

test('the stored prefix drops exactly what was stored, across batches, and nothing after it', () => {
  const prefix = new StoredPrefix({
    harness: 3,
    raw: 2,
    log: { stderr: { chars: 5, truncated: false }, agentd: { chars: 0, truncated: false } },
  })
  expect(prefix.newEvents(['e1', 'e2'])).toEqual([])
  expect(prefix.newEvents(['e3', 'e4', 'e5'])).toEqual(['e4', 'e5'])
  expect(prefix.newEvents(['e6'])).toEqual(['e6'])
  expect(prefix.newRaw(['l1', 'l2', 'l3'])).toEqual(['l3'])
  expect(prefix.newStderr('abc')).toBe('')
  expect(prefix.newStderr('defgh')).toBe('fgh')
  expect(prefix.newStderr('i')).toBe('i')
  // A stderr that reached its cap before the restart stays dropped (it is no longer stored).
  const capped = new StoredPrefix({
    harness: 0,
    raw: 0,
    log: { stderr: { chars: 10, truncated: true }, agentd: { chars: 0, truncated: false } },
  })
  expect(capped.newStderr('x'.repeat(1000))).toBe('')
  // A turn not taken over drops nothing.
  expect(new StoredPrefix(null).newEvents(['a'])).toEqual(['a'])
})
