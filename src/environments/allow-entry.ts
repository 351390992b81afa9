import { isIPv4, isIPv6 } from 'node:net'

/**
 * One entry of a Project's `network.allow` (contract section 10), parsed:
 * - `host`: a host name (`api.example.com`), lower-cased;
 * - `suffix`: `*.example.com`, any name below that domain (`a.example.com`, `a.b.example.com`),
 *   not the domain itself; `host` is the domain, lower-cased;
 * - `ip`: an IPv4 literal, or an IPv6 one (bare, or in brackets, which it needs when a port
 *   follows); `host` is the address in its canonical form, without brackets;
 * - `registries`: the word `registries`, the public package registries of REGISTRY_HOSTS.
 * `port` is the `:port` the entry names (1 to 65535); null: DEFAULT_PORTS.
 */
export interface AllowEntry {
  kind: 'host' | 'suffix' | 'ip' | 'registries'
  host: string
  port: number | null
}

/** The ports an entry without one allows: https and http (not every port: ssh, databases and the like only when named). */
export const DEFAULT_PORTS: readonly number[] = [443, 80]

/** At most this many entries in one Project's `allow`. */
export const MAX_ALLOW_ENTRIES = 100

/**
 * What `registries` allows: the public package registries of npm, PyPI, crates.io, the Go module
 * proxy and Debian, on https, and Debian's also on http (apt's default sources are `http://`).
 * README "Project environments" lists the same hosts.
 */
export const REGISTRY_HOSTS: readonly { host: string; port: number }[] = [
  // npm
  { host: 'registry.npmjs.org', port: 443 },
  // PyPI: the index, and the files it links to
  { host: 'pypi.org', port: 443 },
  { host: 'files.pythonhosted.org', port: 443 },
  // crates.io: the API, the sparse index, the crate downloads
  { host: 'crates.io', port: 443 },
  { host: 'index.crates.io', port: 443 },
  { host: 'static.crates.io', port: 443 },
  // Go: the module proxy and the checksum database
  { host: 'proxy.golang.org', port: 443 },
  { host: 'sum.golang.org', port: 443 },
  // Debian: the archive and its security updates
  { host: 'deb.debian.org', port: 80 },
  { host: 'deb.debian.org', port: 443 },
  { host: 'security.debian.org', port: 80 },
  { host: 'security.debian.org', port: 443 },
]

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/
const PORT = /^[1-9][0-9]{0,4}$/

/** A DNS host name: letters, digits and inner dashes per label, at most 253 characters, not ending in a number (that is an address). */
function isHostName(name: string): boolean {
  if (name.length === 0 || name.length > 253) return false
  const labels = name.split('.')
  if (!labels.every((label) => LABEL.test(label))) return false
  return !/^[0-9]+$/.test(labels[labels.length - 1]!)
}

/** The canonical text of an IPv6 address (`0:0::1` → `::1`), as a URL writes it. */
const canonicalV6 = (address: string): string => new URL(`http://[${address}]/`).hostname.slice(1, -1)

function parsePort(text: string): number | null {
  if (!PORT.test(text)) return null
  const port = Number(text)
  return port <= 65535 ? port : null
}

/**
 * An allow entry parsed, or null when `text` is none of the forms: a host name, `*.` and a domain
 * (of at least two labels), an IP literal, each optionally followed by `:port`, or `registries`.
 * Case does not matter in names; no spaces, schemes, paths or trailing dots.
 */
export function parseAllowEntry(text: string): AllowEntry | null {
  if (text.length === 0 || text.length > 300) return null
  if (text === 'registries') return { kind: 'registries', host: 'registries', port: null }
  // [v6] or [v6]:port
  if (text.startsWith('[')) {
    const close = text.indexOf(']')
    if (close < 0) return null
    const address = text.slice(1, close)
    const rest = text.slice(close + 1)
    if (!isIPv6(address) || address.includes('%')) return null
    if (rest === '') return { kind: 'ip', host: canonicalV6(address), port: null }
    if (!rest.startsWith(':')) return null
    const port = parsePort(rest.slice(1))
    return port === null ? null : { kind: 'ip', host: canonicalV6(address), port }
  }
  // A bare v6 (no port can follow it: its colons would be ambiguous).
  if (text.indexOf(':') !== text.lastIndexOf(':')) {
    return isIPv6(text) && !text.includes('%') ? { kind: 'ip', host: canonicalV6(text), port: null } : null
  }
  const colon = text.indexOf(':')
  const name = (colon < 0 ? text : text.slice(0, colon)).toLowerCase()
  let port: number | null = null
  if (colon >= 0) {
    port = parsePort(text.slice(colon + 1))
    if (port === null) return null
  }
  if (name === 'registries') return null // the word takes no port
  if (isIPv4(name)) return { kind: 'ip', host: name, port }
  if (name.startsWith('*.')) {
    const domain = name.slice(2)
    return isHostName(domain) && domain.includes('.') ? { kind: 'suffix', host: domain, port } : null
  }
  return isHostName(name) ? { kind: 'host', host: name, port } : null
}

/**
 * Whether `entries` let a sandbox reach `host` (a name or an address, as the client asked for it)
 * on `port`. Names compare without case; an IP entry matches only the literal address asked for
 * (never a name that resolves to it); an entry without a port allows DEFAULT_PORTS; `registries`
 * matches REGISTRY_HOSTS on their ports.
 */
export function allowedBy(entries: readonly AllowEntry[], host: string, port: number): boolean {
  let asked = host.toLowerCase()
  if (asked.startsWith('[') && asked.endsWith(']')) asked = asked.slice(1, -1)
  if (isIPv6(asked)) asked = canonicalV6(asked)
  const portFits = (entry: AllowEntry) => (entry.port === null ? DEFAULT_PORTS.includes(port) : entry.port === port)
  return entries.some((entry) => {
    switch (entry.kind) {
      case 'registries':
        return REGISTRY_HOSTS.some((r) => r.host === asked && r.port === port)
      case 'suffix':
        return asked.endsWith(`.${entry.host}`) && portFits(entry)
      case 'host':
      case 'ip':
        return asked === entry.host && portFits(entry)
    }
  })
}
