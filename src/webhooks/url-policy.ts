import { lookup } from 'node:dns/promises'
import { isIP } from 'node:net'

/** Resolves a host name to every address it has (A and AAAA). Injected in tests. */
export type ResolveHost = (host: string) => Promise<string[]>

export const resolveHost: ResolveHost = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address)

export const MAX_WEBHOOK_URL_LENGTH = 2048

// Ranges a webhook must never reach: this host, private networks, link-local (cloud metadata at
// 169.254.169.254), carrier-grade NAT, documentation, benchmarking, multicast and reserved space.
const BLOCKED_V4: [string, number][] = [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
]

const BLOCKED_V6: [string, number][] = [
  ['::', 96], // unspecified, loopback and the deprecated IPv4-compatible block
  ['64:ff9b:1::', 48], // local-use NAT64
  ['100::', 64], // discard
  ['2001::', 32], // Teredo
  ['2001:db8::', 32], // documentation
  ['fc00::', 7], // unique local (AWS's IPv6 metadata address fd00:ec2::254 is in here)
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8], // multicast
]

// IPv6 blocks that carry an IPv4 address: the embedded address decides.
const EMBEDDING_V6: { prefix: string; bits: number; shift: bigint }[] = [
  { prefix: '::ffff:0:0', bits: 96, shift: 0n }, // IPv4-mapped
  { prefix: '64:ff9b::', bits: 96, shift: 0n }, // NAT64
  { prefix: '2002::', bits: 16, shift: 80n }, // 6to4
]

function v4ToInt(ip: string): number {
  return ip.split('.').reduce((n, part) => n * 256 + Number(part), 0)
}

function v6ToBigInt(ip: string): bigint {
  let text = ip.toLowerCase()
  // A trailing dotted quad becomes two hextets.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)
  if (dotted) {
    const n = v4ToInt(dotted[1]!)
    text = text.slice(0, -dotted[1]!.length) + `${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`
  }
  const [head, tail] = text.split('::') as [string, string | undefined]
  const left = head ? head.split(':') : []
  const right = tail !== undefined && tail !== '' ? tail.split(':') : []
  const groups = tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill('0'), ...right]
  return groups.reduce((n, g) => (n << 16n) | BigInt(parseInt(g || '0', 16)), 0n)
}

const inV4 = (ip: number, [base, bits]: [string, number]) => bits === 0 || ip >>> (32 - bits) === v4ToInt(base) >>> (32 - bits)
const inV6 = (ip: bigint, base: string, bits: number) => ip >> BigInt(128 - bits) === v6ToBigInt(base) >> BigInt(128 - bits)

/** True when `ip` (v4 or v6 text) is a public unicast address a webhook may be sent to. */
export function isPublicAddress(ip: string): boolean {
  const family = isIP(ip)
  if (family === 4) {
    const n = v4ToInt(ip)
    return !BLOCKED_V4.some((range) => inV4(n, range))
  }
  if (family !== 6) return false
  const n = v6ToBigInt(ip)
  for (const { prefix, bits, shift } of EMBEDDING_V6) {
    if (inV6(n, prefix, bits)) {
      const v4 = Number((n >> shift) & 0xffffffffn)
      return isPublicAddress([v4 >>> 24, (v4 >>> 16) & 255, (v4 >>> 8) & 255, v4 & 255].join('.'))
    }
  }
  return !BLOCKED_V6.some(([base, bits]) => inV6(n, base, bits))
}

/** The URL's host as an address or a name: IPv6 literals lose their brackets. */
export function hostOf(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
}

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
