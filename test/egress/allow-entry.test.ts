import { expect, test } from 'bun:test'
import { AllowList, parseAllowEntry, REGISTRY_HOSTS, type AllowEntry } from '../../src/egress/allowlist'

const allowedBy = (entries: AllowEntry[], host: string, port: number) => new AllowList(entries).allows(host, port)

/** `network.allow` entries (contract section 10): what parses to what, and what an entry lets through. */

test('each form parses to its kind, host (lower case, canonical address) and port', () => {
  const cases: [string, AllowEntry][] = [
    ['registries', { kind: 'registries', host: 'registries', port: null }],
    ['Example.COM', { kind: 'host', host: 'example.com', port: null }],
    ['example.com:8443', { kind: 'host', host: 'example.com', port: 8443 }],
    ['localhost', { kind: 'host', host: 'localhost', port: null }],
    ['*.Example.com', { kind: 'suffix', host: 'example.com', port: null }],
    ['*.example.com:443', { kind: 'suffix', host: 'example.com', port: 443 }],
    ['10.0.0.1', { kind: 'ip', host: '10.0.0.1', port: null }],
    ['10.0.0.1:65535', { kind: 'ip', host: '10.0.0.1', port: 65535 }],
    ['2001:DB8:0:0::1', { kind: 'ip', host: '2001:db8::1', port: null }],
    ['[2001:db8::1]', { kind: 'ip', host: '2001:db8::1', port: null }],
    ['[::1]:1', { kind: 'ip', host: '::1', port: 1 }],
  ]
  for (const [text, entry] of cases) expect({ text, entry: parseAllowEntry(text) }).toEqual({ text, entry })
})

test('anything else is null', () => {
  for (const text of [
    '',
    'a b',
    'http://a.com',
    'a.com/',
    'a.com.',
    '*.com',
    '*.a',
    '**.a.com',
    'a.*.com',
    'a.com:0',
    'a.com:65536',
    'a.com:01',
    'a.com:x',
    '1.2.3',
    '1.2.3.4.5',
    '999.1.1.1',
    '[::1',
    '[::1]x',
    '[::1]:',
    '[1.2.3.4]',
    '::1:80:',
    'fe80::1%eth0',
    'registries:80',
    `${'a'.repeat(64)}.com`,
    'x'.repeat(301),
  ]) {
    expect({ text, entry: parseAllowEntry(text) }).toEqual({ text, entry: null })
  }
})

test('allowedBy: names without case, suffixes below the domain only, the port named or else 443 and 80, registries on their own ports', () => {
  const entries = ['api.example.com:443', '*.example.org', '10.0.0.1', '[2001:db8::1]:8080', 'registries'].map((e) => parseAllowEntry(e)!)
  expect(allowedBy(entries, 'API.example.com', 443)).toBe(true)
  expect(allowedBy(entries, 'api.example.com', 80)).toBe(false)
  expect(allowedBy(entries, 'a.b.example.org', 443)).toBe(true)
  expect(allowedBy(entries, 'a.b.example.org', 80)).toBe(true)
  expect(allowedBy(entries, 'a.b.example.org', 1234)).toBe(false)
  expect(allowedBy(entries, 'example.org', 443)).toBe(false)
  expect(allowedBy(entries, 'badexample.org', 443)).toBe(false)
  expect(allowedBy(entries, '10.0.0.1', 443)).toBe(true)
  expect(allowedBy(entries, '10.0.0.1', 22)).toBe(false)
  expect(allowedBy(entries, '[2001:db8:0::1]', 8080)).toBe(true)
  expect(allowedBy(entries, '2001:db8::1', 443)).toBe(false)
  for (const host of REGISTRY_HOSTS) for (const port of [443, 80]) expect(allowedBy(entries, host, port)).toBe(true)
  expect(allowedBy(entries, 'registry.npmjs.org', 22)).toBe(false)
  expect(allowedBy([], 'example.com', 443)).toBe(false)
})

test('REGISTRY_HOSTS: npm, PyPI, crates.io, the Go module proxy and Debian', () => {
  expect([...REGISTRY_HOSTS].sort()).toEqual(
    [
      'crates.io',
      'deb.debian.org',
      'files.pythonhosted.org',
      'index.crates.io',
      'proxy.golang.org',
      'pypi.org',
      'registry.npmjs.org',
      'registry.yarnpkg.com',
      'security.debian.org',
      'static.crates.io',
      'sum.golang.org',
    ].sort(),
  )
  for (const host of REGISTRY_HOSTS) expect(parseAllowEntry(host)?.kind).toBe('host')
})
