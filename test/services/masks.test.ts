import { expect, test } from 'bun:test'
import { Masker, SecretMasks } from '../../src/session-record/masks'

/** Secret masking (contract section 10) where text enters storage: strings only, never the JSON's own structure. */

test('values that look like JSON tokens or keys (true, 5432, text) mask strings only: the structure, numbers and booleans stay', () => {
  const masker = new Masker(new Set(['true', '5432', 'text']))
  const event = { type: 'tool_result', success: true, port: 15432, text: 'CI=true on port 5432', nested: [{ text: 'true' }] }
  expect(masker.maskJson(event) as unknown).toEqual({
    type: 'tool_result',
    success: true,
    port: 15432,
    '***': 'CI=*** on port ***',
    nested: [{ '***': '***' }],
  })
  // A raw line of a CLI's stream stays JSON.
  const line = JSON.stringify(event)
  expect(JSON.parse(masker.maskLine(line))).toEqual(masker.maskJson(event))
  // Other text is masked as text.
  expect(masker.maskLine('export CI=true')).toBe('export CI=***')
})

test('a multi-line value is masked whole and line by line; quotes and backslashes in JSON text too; short values are left alone', () => {
  const pem = '-----BEGIN KEY-----\nMIIEabcdefgh\n-----END KEY-----'
  const quoted = 'pa"ss\\word'
  const masker = new Masker(new Set([pem, quoted, 'abc']))
  expect(masker.mask(`key: ${pem}`)).toBe('key: ***')
  expect(masker.mask('setup: MIIEabcdefgh')).toBe('setup: ***')
  expect(masker.mask(JSON.stringify({ v: quoted }))).toBe('{"v":"***"}')
  expect(masker.mask('abc stays')).toBe('abc stays')
  expect(masker.maskJson({ a: 1 })).toEqual({ a: 1 })
})

test('SecretMasks: values given to a session stay masked for it; none worth masking, no masker', () => {
  const masks = new SecretMasks()
  masks.add('s1', ['abc'])
  expect(masks.of('s1')).toBeNull()
  masks.add('s1', ['first-value'])
  masks.add('s1', ['second-value'])
  expect(masks.of('s1')!.mask('first-value second-value')).toBe('*** ***')
  expect(masks.of('s2')).toBeNull()
  masks.forget('s1')
  expect(masks.of('s1')).toBeNull()
})
