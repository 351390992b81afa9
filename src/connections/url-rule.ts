import { isIP } from 'node:net'
import { hostOf, isPublicAddress, type ResolveHost } from '../egress/address-policy'

/** Why `raw` cannot be a tool server URL, or null: https, every address it resolves to public (spec 4.1 rule 3). */
export async function toolServerUrlProblem(raw: string, rules: { resolve: ResolveHost; allowPrivate: boolean }): Promise<string | null> {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return `${JSON.stringify(raw)} is not a URL`
  }
  if (url.protocol !== 'https:' && !(rules.allowPrivate && url.protocol === 'http:')) return `${url.origin} is not an https URL`
  if (url.username || url.password) return 'the URL may not carry a user or password (use auth)'
  if (rules.allowPrivate) return null
  const host = hostOf(url)
  if (isIP(host)) return isPublicAddress(host) ? null : `${host} is not a public address`
  const addresses = await rules.resolve(host).catch(() => [] as string[])
  if (addresses.length === 0) return `${host} does not resolve`
  const inside = addresses.find((a) => !isPublicAddress(a))
  return inside ? `${host} resolves to a non-public address (${inside})` : null
}
