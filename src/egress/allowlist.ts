import { isIPv4, isIPv6 } from 'node:net'

/**
 * Where a Project's sandbox may connect through the egress proxy: its `network.allow` entries
 * (contract section 10). An entry is a host name, `*.` and a domain (any name below the domain,
 * at any depth, but not the domain itself: docs/decisions.md), an IP literal (IPv6 in brackets
 * when a port follows), each optionally `:port`, or the word `registries`. An entry without a port
 * allows 443 and 80. Only what the sandbox asks for is matched here, by name or literal; whether the
 * address it resolves to may be reached is the address policy's question (proxy.ts).
 */

/** One allow entry, parsed. `host` is lower-case, without a trailing dot or brackets; `port` null: 443 and 80. */
export interface AllowEntry {
  kind: 'host' | 'suffix' | 'ip' | 'registries'
  host: string
  port: number | null
}

/** What `registries` allows, on 443 and 80: npm (and yarn's mirror of it), PyPI, crates.io, the Go module proxy, Debian. */
export const REGISTRY_HOSTS: readonly string[] = [
  'registry.npmjs.org',
  'registry.yarnpkg.com',
  'pypi.org',
  'files.pythonhosted.org',
  'crates.io',
  'index.crates.io',
  'static.crates.io',
  'proxy.golang.org',
  'sum.golang.org',
  'deb.debian.org',
  'security.debian.org',
]

/** The ports an entry without one allows: https and http. */
export const DEFAULT_PORTS: readonly number[] = [443, 80]

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/

/** A DNS name (lower-case): letter-digit-dash labels, at most 253 characters, the last not all digits (that would be an address). */
function isHostName(name: string): boolean {
  if (name.length === 0 || name.length > 253) return false
  const labels = name.split('.')
  return labels.every((label) => LABEL.test(label)) && !/^[0-9]+$/.test(labels[labels.length - 1]!)
}

/** An IPv6 literal without a zone (`fe80::1%eth0` names an interface of this host: never an entry, and no URL takes it). */
function isV6Literal(text: string): boolean {
  return isIPv6(text) && !text.includes('%')
}

/** The canonical text of an IPv6 address (`0:0::1` → `::1`), as a URL writes it. */
function canonicalV6(address: string): string {
  return new URL(`http://[${address}]/`).hostname.slice(1, -1)
}

/**
 * A host as the sandbox names it (CONNECT's authority, an absolute URL's host) in the form the list
 * keeps: lower-case, no trailing dot, an IPv6 literal without brackets and canonical. Null when it
 * is neither a DNS name nor an IP literal.
 */
export function normalizeHost(raw: string): string | null {
  let host = raw.toLowerCase()
  if (host.startsWith('[') && host.endsWith(']')) return isV6Literal(host.slice(1, -1)) ? canonicalV6(host.slice(1, -1)) : null
  if (isV6Literal(host)) return canonicalV6(host)
  if (host.endsWith('.')) host = host.slice(0, -1)
  return isIPv4(host) || isHostName(host) ? host : null
}

function parsePort(text: string): number | null {
  if (!/^[1-9][0-9]{0,4}$/.test(text)) return null
  const port = Number(text)
  return port <= 65535 ? port : null
}

/** An allow entry parsed, or null when `text` is none of the forms (no schemes, paths, spaces or trailing dots). */
export function parseAllowEntry(text: string): AllowEntry | null {
  if (text === 'registries') return { kind: 'registries', host: 'registries', port: null }
  if (text.length === 0 || text.length > 300) return null
  let host = text
  let port: number | null = null
  if (text.startsWith('[')) {
    const close = text.indexOf(']')
    const rest = text.slice(close + 1)
    if (close < 0 || (rest !== '' && !rest.startsWith(':'))) return null
    host = text.slice(1, close)
    if (!isV6Literal(host)) return null
    if (rest !== '' && (port = parsePort(rest.slice(1))) === null) return null
    return { kind: 'ip', host: canonicalV6(host), port }
  }
  if (isV6Literal(text)) return { kind: 'ip', host: canonicalV6(text), port: null }
  const colon = text.lastIndexOf(':')
  if (colon >= 0) {
    host = text.slice(0, colon)
    if ((port = parsePort(text.slice(colon + 1))) === null) return null
  }
  host = host.toLowerCase()
  // The word is the preset, never a host: `registries:443` is a mistake, not a host named so.
  if (host === 'registries') return null
  if (isIPv4(host)) return { kind: 'ip', host, port }
  if (host.startsWith('*.')) {
    const domain = host.slice(2)
    return isHostName(domain) && domain.includes('.') ? { kind: 'suffix', host: domain, port } : null
  }
  return isHostName(host) ? { kind: 'host', host, port } : null
}

/** A Project's allow list, asked per connection. */
export class AllowList {
  /** Exact names and literals, each with its ports. */
  private readonly exact = new Map<string, Set<number>>()
  private readonly suffixes: { domain: string; ports: readonly number[] }[] = []

  constructor(entries: readonly AllowEntry[]) {
    const add = (host: string, ports: readonly number[]) => {
      const set = this.exact.get(host) ?? new Set<number>()
      for (const port of ports) set.add(port)
      this.exact.set(host, set)
    }
    for (const entry of entries) {
      const ports = entry.port === null ? DEFAULT_PORTS : [entry.port]
      if (entry.kind === 'registries') for (const host of REGISTRY_HOSTS) add(host, ports)
      else if (entry.kind === 'suffix') this.suffixes.push({ domain: entry.host, ports })
      else add(entry.host, ports)
    }
  }

  /** The list of `texts` (a Project's `network.allow`); throws on an entry that does not parse (validated at the API already). */
  static parse(texts: readonly string[]): AllowList {
    return new AllowList(
      texts.map((text) => {
        const entry = parseAllowEntry(text)
        if (!entry) throw new Error(`not an allow entry: ${JSON.stringify(text)}`)
        return entry
      }),
    )
  }

  /** Whether nothing is allowed (the sandbox then has no network). */
  get empty(): boolean {
    return this.exact.size === 0 && this.suffixes.length === 0
  }

  /** Whether the sandbox may connect to `host` (a name or a literal, brackets or not; any case, a trailing dot ignored) on `port`. */
  allows(host: string, port: number): boolean {
    const name = normalizeHost(host)
    if (name === null) return false
    if (this.exact.get(name)?.has(port)) return true
    return this.suffixes.some(({ domain, ports }) => name.endsWith(`.${domain}`) && ports.includes(port))
  }
}
