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
