import { expect, test } from 'bun:test'
import { ChunkPool, giveBack } from '../../sandbox/chunk-pool'

test('a chunk given back is read into again; one never lent, or lent twice over, is left alone; the pool keeps at most its size', () => {
  const pool = new ChunkPool(16, 2)
  const first = pool.take()
  const view = pool.lend(first.subarray(0, 4), first)
  expect(pool.take()).not.toBe(first) // still lent: a fresh buffer
  giveBack(view)
  expect(pool.take()).toBe(first) // back: reused
  giveBack(view) // a second give-back of the same view returns nothing twice
  expect(pool.take()).not.toBe(first)
  giveBack(new Uint8Array(16)) // not the pool's: ignored
  const many = [pool.take(), pool.take(), pool.take()]
  for (const whole of many) giveBack(pool.lend(whole, whole))
  // Three came back, two were kept: two takes reuse them, the third is new.
  const again = [pool.take(), pool.take(), pool.take()]
  expect(again.filter((b) => many.includes(b)).length).toBe(2)
  expect(many.includes(again[2]!)).toBe(false)
})
