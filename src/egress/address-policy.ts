import { lookup } from 'node:dns/promises'
import { isIP } from 'node:net'

/**
 * The outbound-address policy, one for everything agentd connects to on someone else's say-so:
 * webhooks, caller-named fetches (images, skills), tool servers, and a sandbox's egress proxy. An
 * address is public unicast or it is refused (this host, private networks, link-local and the
 * cloud metadata address, ...), unless the caller runs with a test-only `allowPrivate`. Names are
 * checked as the connection is made (`checkedLookup`, `resolvePublic`) and the checked address is
 * the one connected to, so a name cannot be rebound to an inside address between check and use.
 */

/** Resolves a host name to every address it has (A and AAAA). Injected in tests. */
export type ResolveHost = (host: string) => Promise<string[]>

export const resolveHost: ResolveHost = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address)

// Ranges nothing of ours may reach on a caller's or a sandbox's behalf: this host, private networks, link-local (cloud metadata at
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

/** True when `ip` (v4 or v6 text) is a public unicast address: one a webhook, a fetch or the egress proxy may reach. */
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

/** A name resolved to an address outside the public internet: the connection is refused. */
export class AddressRefused extends Error {
  override name = 'AddressRefused'
  constructor(
    readonly host: string,
    readonly address: string,
  ) {
    super(`${host} resolves to a non-public address (${address})`)
  }
}

/**
 * Every address of `host` (a name, or an IP literal without brackets), all of them public unless
 * `allowPrivate`. Rejects with `AddressRefused` when one is not (one inside address is enough: a
 * client may pick any), or with an Error when the name does not resolve.
 */
export async function resolvePublic(host: string, options: { resolve: ResolveHost; allowPrivate: boolean }): Promise<string[]> {
  const addresses = isIP(host) ? [host] : await options.resolve(host)
  if (addresses.length === 0) throw new Error(`${host} does not resolve`)
  const inside = addresses.find((a) => !isPublicAddress(a))
  if (inside && !options.allowPrivate) throw new AddressRefused(host, inside)
  return addresses
}

type LookupCallback = (err: Error | null, address: string | { address: string; family: number }[], family?: number) => void

/**
 * `lookup` for node:http, node:https and node:net (both its callback forms, one address or `all`)
 * that resolves with `resolvePublic`: the connection is made to an address that was checked, or
 * fails with its error (`AddressRefused` for an inside address).
 */
export function checkedLookup(options: { resolve: ResolveHost; allowPrivate: boolean }) {
  return (hostname: string, opts: { all?: boolean }, callback: LookupCallback): void => {
    const all = opts.all === true
    resolvePublic(hostname, options).then(
      (addresses) => {
        if (all)
          callback(
            null,
            addresses.map((address) => ({ address, family: isIP(address) })),
          )
        else callback(null, addresses[0]!, isIP(addresses[0]!))
      },
      (err: Error) => callback(err, all ? [] : '', 0),
    )
  }
}
