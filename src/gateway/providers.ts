/**
 * Real model providers from the operator's config file (`AGENTD_CONFIG`, JSON):
 *
 *   { "providers": { "anthropic": { "base_url": "https://api.anthropic.com", "api_key": "sk-ant-…" },
 *                    "openai":    { "base_url": "https://api.openai.com/v1", "api_key": "sk-…" },
 *                    "google":    { "base_url": "https://generativelanguage.googleapis.com", "api_key": "…" } } }
 *
 * `base_url` is what the provider's own CLI would take as its base URL. The gateway forwards every
 * request for a model other than `scripted` to the provider that speaks its protocol.
 */
import { ConfigError, readConfigFile } from '../config'
import type { ProviderName, Providers } from './protocol'
import { isObject } from '../domain/values'

const NAMES: readonly ProviderName[] = ['anthropic', 'openai', 'google']

export function loadProviders(configFile: string | null): Providers {
  return parseProviders(readConfigFile(configFile).providers)
}

/** Validates the `providers` key; a mistake stops the service at start with the field's path. */
export function parseProviders(raw: unknown): Providers {
  if (raw === undefined) return {}
  if (!isObject(raw)) throw new ConfigError('AGENTD_CONFIG providers must be an object keyed by anthropic, openai or google')
  const providers: Providers = {}
  for (const [name, entry] of Object.entries(raw)) {
    if (!(NAMES as readonly string[]).includes(name))
      throw new ConfigError(`AGENTD_CONFIG providers.${name}: unknown provider (use ${NAMES.join(', ')})`)
    if (!isObject(entry)) throw new ConfigError(`AGENTD_CONFIG providers.${name} must be {base_url, api_key}`)
    const { base_url: baseUrl, api_key: apiKey } = entry
    if (typeof baseUrl !== 'string' || !/^https?:\/\/[^/]/.test(baseUrl) || !URL.canParse(baseUrl)) {
      throw new ConfigError(`AGENTD_CONFIG providers.${name}.base_url must be an http(s) URL`)
    }
    if (typeof apiKey !== 'string' || apiKey === '')
      throw new ConfigError(`AGENTD_CONFIG providers.${name}.api_key must be a non-empty string`)
    providers[name as ProviderName] = { baseUrl: baseUrl.replace(/\/+$/, ''), apiKey }
  }
  return providers
}
