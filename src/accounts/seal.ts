import { CompactEncrypt, compactDecrypt } from 'jose'

/**
 * Provider keys at rest: a JWE (`dir`, A256GCM) under the operator's 32-byte key, whose protected
 * header names the account it belongs to, so a sealed key copied onto another row does not open.
 */
export class KeySealer {
  constructor(private readonly key: Uint8Array) {
    if (key.length !== 32) throw new Error('the accounts encryption key must be 32 bytes')
  }

  seal(accountId: string, secret: string): Promise<string> {
    return new CompactEncrypt(new TextEncoder().encode(secret)).setProtectedHeader({ alg: 'dir', enc: 'A256GCM', acct: accountId }).encrypt(this.key)
  }

  async open(accountId: string, sealed: string): Promise<string> {
    const { plaintext, protectedHeader } = await compactDecrypt(sealed, this.key)
    if (protectedHeader.acct !== accountId) throw new Error(`the sealed key is not account ${accountId}'s`)
    return new TextDecoder().decode(plaintext)
  }
}
