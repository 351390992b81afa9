import { isIP } from 'node:net'
import { hostOf, isPublicAddress, type ResolveHost } from '../egress/address-policy'

// The address rules are shared (egress/address-policy.ts); these are the webhook URL's own.

export const MAX_WEBHOOK_URL_LENGTH = 2048

/**
 * Why `raw` cannot be a webhook URL, or null when it can. Public https only: the host must
 * resolve, and every address it resolves to must be public (spec 4.5, 8). `allowPrivate`
 * (AGENTD_WEBHOOK_ALLOW_PRIVATE, tests only) also accepts http and any address.
 */
export async function webhookUrlProblem(raw: string, allowPrivate: boolean, resolve: ResolveHost): Promise<string | null> {
  if (raw.length > MAX_WEBHOOK_URL_LENGTH) return `webhook_url is longer than ${MAX_WEBHOOK_URL_LENGTH} characters`
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return 'webhook_url is not a URL'
  }
  const schemes = allowPrivate ? ['https:', 'http:'] : ['https:']
  if (!schemes.includes(url.protocol)) return 'webhook_url must be an https URL'
  if (url.hostname === '') return 'webhook_url has no host'
  if (allowPrivate) return null
  const host = hostOf(url)
  if (isIP(host)) return isPublicAddress(host) ? null : `webhook_url points at a non-public address (${host})`
  let addresses: string[]
  try {
    addresses = await resolve(host)
  } catch {
    return `webhook_url host ${host} does not resolve`
  }
  if (addresses.length === 0) return `webhook_url host ${host} does not resolve`
  const inside = addresses.find((a) => !isPublicAddress(a))
  return inside ? `webhook_url host ${host} resolves to a non-public address (${inside})` : null
}
