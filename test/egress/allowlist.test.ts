import { expect, test } from 'bun:test'
import { AllowList, parseAllowEntry, REGISTRY_HOSTS } from '../../src/egress/allowlist'

test('entries parse to their kind, host and port', () => {
  expect(parseAllowEntry('registry.npmjs.org')).toEqual({ kind: 'host', host: 'registry.npmjs.org', port: null })
  expect(parseAllowEntry('API.Example.com:8443')).toEqual({ kind: 'host', host: 'api.example.com', port: 8443 })
  expect(parseAllowEntry('*.githubusercontent.com')).toEqual({ kind: 'suffix', host: 'githubusercontent.com', port: null })
  expect(parseAllowEntry('*.example.com:443')).toEqual({ kind: 'suffix', host: 'example.com', port: 443 })
  expect(parseAllowEntry('93.184.216.34')).toEqual({ kind: 'ip', host: '93.184.216.34', port: null })
  expect(parseAllowEntry('93.184.216.34:80')).toEqual({ kind: 'ip', host: '93.184.216.34', port: 80 })
  expect(parseAllowEntry('2606:4700::1111')).toEqual({ kind: 'ip', host: '2606:4700::1111', port: null })
  expect(parseAllowEntry('[2606:4700:0::1111]:443')).toEqual({ kind: 'ip', host: '2606:4700::1111', port: 443 })
  expect(parseAllowEntry('[::1]')).toEqual({ kind: 'ip', host: '::1', port: null })
  expect(parseAllowEntry('registries')).toEqual({ kind: 'registries', host: 'registries', port: null })
  for (const bad of [
    '',
    'https://example.com',
    'example.com/path',
    'example.com.',
    'exa mple.com',
    '*.com',
    '*example.com',
    'a.*.example.com',
    'example.com:0',
    'example.com:65536',
    'example.com:08',
    'example.com:',
    '[::1',
    '[::1]x',
    '[example.com]:80',
    '::1:443x',
    'user@example.com',
    '-a.example.com',
    '1.2.3',
    'x'.repeat(301),
  ]) {
    expect([bad, parseAllowEntry(bad)]).toEqual([bad, null])
  }
})

test('a name without a port allows 443 and 80; with one, that port only; case and a trailing dot do not matter', () => {
  const list = AllowList.parse(['example.com', 'git.example.org:22', '93.184.216.34:8080', '[2606:4700::1111]'])
  expect(list.allows('example.com', 443)).toBe(true)
  expect(list.allows('EXAMPLE.com.', 80)).toBe(true)
  expect(list.allows('example.com', 8443)).toBe(false)
  expect(list.allows('www.example.com', 443)).toBe(false)
  expect(list.allows('git.example.org', 22)).toBe(true)
  expect(list.allows('git.example.org', 443)).toBe(false)
  expect(list.allows('93.184.216.34', 8080)).toBe(true)
  expect(list.allows('93.184.216.34', 443)).toBe(false)
  expect(list.allows('[2606:4700:0:0::1111]', 443)).toBe(true)
  expect(list.allows('2606:4700::1111', 80)).toBe(true)
  expect(list.allows('not a host', 443)).toBe(false)
  expect(new AllowList([]).empty).toBe(true)
  expect(list.empty).toBe(false)
})

test('*. matches names below the domain at any depth, never the domain itself', () => {
  const list = AllowList.parse(['*.example.com'])
  expect(list.allows('a.example.com', 443)).toBe(true)
  expect(list.allows('a.b.example.com', 80)).toBe(true)
  expect(list.allows('example.com', 443)).toBe(false)
  expect(list.allows('badexample.com', 443)).toBe(false)
  expect(list.allows('example.com.evil.test', 443)).toBe(false)
  expect(list.allows('a.example.com', 22)).toBe(false)
})

test('registries allows the package registries on 443 and 80, and nothing else', () => {
  const list = AllowList.parse(['registries'])
  for (const host of REGISTRY_HOSTS) {
    expect([host, list.allows(host, 443), list.allows(host, 80)]).toEqual([host, true, true])
  }
  expect(list.allows('registry.npmjs.org', 443)).toBe(true)
  expect(list.allows('registry.npmjs.org', 22)).toBe(false)
  expect(list.allows('example.com', 443)).toBe(false)
  expect(list.allows('npmjs.org', 443)).toBe(false)
  expect(() => AllowList.parse(['example.com', 'http://example.com'])).toThrow('not an allow entry')
})
