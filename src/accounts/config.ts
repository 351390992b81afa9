import { ConfigError, readConfigFile } from '../config'
import { isObject } from '../domain/values'

/**
 * The key provider API keys are sealed under: `accounts.encryption_key` of the config file
 * (AGENTD_CONFIG), 32 bytes in base64 (`openssl rand -base64 32`). Without one, users cannot store
 * provider keys; with a malformed one, the server does not start.
 */
export function loadAccountsKey(configFile: string | null): Uint8Array | null {
  const accounts = readConfigFile(configFile).accounts
  if (accounts === undefined) return null
  const raw = isObject(accounts) ? accounts.encryption_key : undefined
  const key = typeof raw === 'string' ? Buffer.from(raw, 'base64') : null
  if (!key || key.length !== 32) throw new ConfigError('AGENTD_CONFIG accounts.encryption_key must be 32 bytes in base64 (openssl rand -base64 32)')
  return new Uint8Array(key)
}
