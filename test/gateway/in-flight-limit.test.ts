import { expect, test } from 'bun:test'
import { InFlightLimit } from '../../src/gateway/in-flight-limit'

test('at most max exchanges open per key; a release frees one slot, once; keys do not share', () => {
  const limit = new InFlightLimit(2)
  const a1 = limit.take('a')
  const a2 = limit.take('a')
  expect(a1).not.toBeNull()
  expect(a2).not.toBeNull()
  expect(limit.take('a')).toBeNull()
  expect(limit.take('b')).not.toBeNull()
  a1!()
  const a3 = limit.take('a')
  expect(a3).not.toBeNull()
  expect(limit.take('a')).toBeNull()
  a2!()
  a3!()
  expect(limit.take('a')).not.toBeNull()
  expect(limit.take('a')).not.toBeNull()
  expect(limit.take('a')).toBeNull()
})
