import { expect, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { KeySealer } from '../../src/accounts/seal'

test('a sealed provider key opens only under its key and for its own account; the seal hides it and changes each time', async () => {
  const sealer = new KeySealer(new Uint8Array(randomBytes(32)))
  const secret = 'sk-user-0123456789abcdef'
  const sealed = await sealer.seal('acct_a', secret)
  expect(sealed).not.toContain(secret)
  expect(sealed).not.toContain(Buffer.from(secret).toString('base64url'))
  expect(await sealer.seal('acct_a', secret)).not.toBe(sealed) // a fresh IV per seal
  expect(await sealer.open('acct_a', sealed)).toBe(secret)
  // Copied onto another account's row, it does not open.
  await expect(sealer.open('acct_b', sealed)).rejects.toThrow(/not account acct_b's/)
  // Under another key, or with one byte of its ciphertext changed, neither.
  await expect(new KeySealer(new Uint8Array(randomBytes(32))).open('acct_a', sealed)).rejects.toThrow()
  const parts = sealed.split('.')
  parts[3] = (parts[3]![0] === 'A' ? 'B' : 'A') + parts[3]!.slice(1)
  await expect(sealer.open('acct_a', parts.join('.'))).rejects.toThrow()
  expect(() => new KeySealer(new Uint8Array(16))).toThrow(/32 bytes/)
})

test('a bound seal opens only for its own use and id, never as a provider key, nor a provider key as it', async () => {
  const sealer = new KeySealer(new Uint8Array(randomBytes(32)))
  const secret = 'project-secret-0123456789'
  const binding = { use: 'project_secret', id: 'p1/TOKEN' }
  const sealed = await sealer.sealBound(binding, secret)
  expect(sealed).not.toContain(secret)
  expect(await sealer.openBound(binding, sealed)).toBe(secret)
  await expect(sealer.openBound({ ...binding, id: 'p2/TOKEN' }, sealed)).rejects.toThrow(/not project_secret p2\/TOKEN's/)
  await expect(sealer.openBound({ ...binding, id: 'p1/OTHER' }, sealed)).rejects.toThrow()
  await expect(sealer.openBound({ ...binding, use: 'other' }, sealed)).rejects.toThrow()
  await expect(sealer.open('p1/TOKEN', sealed)).rejects.toThrow()
  const account = await sealer.seal('p1/TOKEN', secret)
  await expect(sealer.openBound(binding, account)).rejects.toThrow()
})

test('digest: keyed under the server key and the use; stable for equal data', () => {
  const key = new Uint8Array(randomBytes(32))
  const sealer = new KeySealer(key)
  expect(sealer.digest('u', 'data')).toMatch(/^[0-9a-f]{64}$/)
  expect(sealer.digest('u', 'data')).toBe(new KeySealer(key).digest('u', 'data'))
  expect(sealer.digest('u', 'data')).not.toBe(sealer.digest('v', 'data'))
  expect(sealer.digest('u', 'data')).not.toBe(new KeySealer(new Uint8Array(randomBytes(32))).digest('u', 'data'))
  expect(sealer.digest('u', 'data')).not.toBe(new Bun.CryptoHasher('sha256').update('data').digest('hex'))
})
