import { randomBytes } from 'node:crypto'
import { closeSync, constants, fsyncSync, linkSync, openSync, readFileSync, unlinkSync, writeSync } from 'node:fs'
import { join } from 'node:path'
import { ConfigError, readConfigFile } from '../config'
import { isObject } from '../domain/values'

/** The key agentd generates when the config names none: in DATA_DIR, mode 0600, base64. */
export const GENERATED_KEY_FILE = 'encryption.key'

/**
 * The key every sealed value is sealed under (Project secrets, provider API keys, tool server
 * tokens): `accounts.encryption_key` of the config file (AGENTD_CONFIG), 32 bytes in base64
 * (`openssl rand -base64 32`). Without one, the key in `<dataDir>/encryption.key`, generated at the
 * first start (32 random bytes, written 0600, said in one log line that never holds the key). A
 * malformed key, in the config or in that file, stops the server.
 */
export function loadAccountsKey(configFile: string | null, dataDir: string, log: (line: string) => void): Uint8Array {
  const accounts = readConfigFile(configFile).accounts
  if (accounts === undefined) return generatedKey(join(dataDir, GENERATED_KEY_FILE), log)
  const raw = isObject(accounts) ? accounts.encryption_key : undefined
  const key = typeof raw === 'string' ? Buffer.from(raw, 'base64') : null
  if (!key || key.length !== 32)
    throw new ConfigError('AGENTD_CONFIG accounts.encryption_key must be 32 bytes in base64 (openssl rand -base64 32)')
  return new Uint8Array(key)
}

function generatedKey(path: string, log: (line: string) => void): Uint8Array {
  const existing = readKeyFile(path)
  if (existing) return existing
  // Written whole to a private temporary file, then linked into place: a crash never leaves a
  // short key file, and of two processes starting at once the second links nothing and reads the first's.
  const temporary = `${path}.${randomBytes(6).toString('hex')}.tmp`
  const fd = openSync(temporary, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600)
  try {
    writeSync(fd, `${randomBytes(32).toString('base64')}\n`)
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
  try {
    linkSync(temporary, path)
    log(
      'agentd: generated the encryption key for sealed values (Project secrets, provider accounts, tool server ' +
        `tokens) at ${path} (mode 0600); back it up with the database, or set accounts.encryption_key in AGENTD_CONFIG`,
    )
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
  } finally {
    unlinkSync(temporary)
  }
  return readKeyFile(path)!
}

/** The key in `path`; null when there is no such file; a ConfigError when it does not hold one. */
function readKeyFile(path: string): Uint8Array | null {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw new ConfigError(`${path} cannot be read: ${(err as Error).message}`)
  }
  const key = Buffer.from(text.trim(), 'base64')
  if (key.length !== 32)
    throw new ConfigError(
      `${path} must hold 32 bytes in base64 (the key agentd generated; restore it from a backup, or set ` +
        'accounts.encryption_key in AGENTD_CONFIG)',
    )
  return new Uint8Array(key)
}
