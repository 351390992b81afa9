import { createHmac, hkdfSync } from 'node:crypto'
import { CompactEncrypt, compactDecrypt } from 'jose'

/**
 * What a sealed value other than a provider key is bound to: what it is for (`use`, e.g.
 * `project_secret`) and which one it is (`id`, e.g. `<project id>/<name>`). Both go in the JWE's
 * protected header, so the value opens only as that same thing.
 */
export interface SealBinding {
  use: string
  id: string
}

/**
 * Values at rest: a JWE (`dir`, A256GCM) under the server's 32-byte key (`accounts.encryption_key`,
 * or the key agentd generated in DATA_DIR), whose protected header names what the value belongs
 * to, so a sealed value copied onto another row does not open.
 *
 * Provider keys and tool server tokens use `seal`/`open` (header `acct`, as ever, so what earlier
 * versions sealed still opens); other values use `sealBound`/`openBound` (headers `use` and `bind`),
 * which a provider key's seal lacks and the other way round: neither opens as the other.
 */
export class KeySealer {
  private digestKeys = new Map<string, Buffer>()

  constructor(private readonly key: Uint8Array) {
    if (key.length !== 32) throw new Error('the accounts encryption key must be 32 bytes')
  }

  seal(accountId: string, secret: string): Promise<string> {
    return new CompactEncrypt(new TextEncoder().encode(secret))
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', acct: accountId })
      .encrypt(this.key)
  }

  async open(accountId: string, sealed: string): Promise<string> {
    const { plaintext, protectedHeader } = await compactDecrypt(sealed, this.key)
    if (protectedHeader.acct !== accountId) throw new Error(`the sealed key is not account ${accountId}'s`)
    return new TextDecoder().decode(plaintext)
  }

  /** Seals `secret` for `binding` alone: only `openBound` with an equal binding opens it. */
  sealBound(binding: SealBinding, secret: string): Promise<string> {
    return new CompactEncrypt(new TextEncoder().encode(secret))
      .setProtectedHeader({ alg: 'dir', enc: 'A256GCM', use: binding.use, bind: binding.id })
      .encrypt(this.key)
  }

  /** The value `sealBound(binding, …)` sealed; throws when it was sealed for anything else, under another key, or altered. */
  async openBound(binding: SealBinding, sealed: string): Promise<string> {
    const { plaintext, protectedHeader } = await compactDecrypt(sealed, this.key)
    if (protectedHeader.use !== binding.use || protectedHeader.bind !== binding.id)
      throw new Error(`the sealed value is not ${binding.use} ${binding.id}'s`)
    return new TextDecoder().decode(plaintext)
  }

  /**
   * HMAC-SHA256 (hex) of `data` under a key derived from the server's key for `use` (HKDF): a
   * fingerprint of secret material that can be stored and compared, yet, unlike a bare hash, cannot
   * be tried against guesses by whoever reads the database without the key.
   */
  digest(use: string, data: string): string {
    let key = this.digestKeys.get(use)
    if (!key) {
      key = Buffer.from(hkdfSync('sha256', this.key, new Uint8Array(0), `agentd digest ${use}`, 32))
      this.digestKeys.set(use, key)
    }
    return createHmac('sha256', key).update(data).digest('hex')
  }
}
