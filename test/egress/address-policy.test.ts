import { expect, test } from 'bun:test'
import { AddressRefused, checkedLookup, isPublicAddress, resolvePublic, type ResolveHost } from '../../src/egress/address-policy'

/** The one outbound-address policy (webhooks, fetches, tool servers, the egress proxy). */

const fixed =
  (table: Record<string, string[]>): ResolveHost =>
  async (host) => {
    const found = table[host]
    if (!found) throw new Error(`ENOTFOUND ${host}`)
    return found
  }

test('address classes', () => {
  for (const ip of [
    '127.0.0.1',
    '127.1.2.3',
    '10.0.0.1',
    '172.16.5.4',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '::1',
    '::',
    'fe80::1',
    'fc00::1',
    'fd00:ec2::254',
    '::ffff:127.0.0.1',
    '::ffff:a9fe:a9fe',
    '64:ff9b::a00:1',
    '2002:7f00:1::1',
    'ff02::1',
  ]) {
    expect([ip, isPublicAddress(ip)]).toEqual([ip, false])
  }
  for (const ip of ['93.184.216.34', '8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '::ffff:8.8.8.8', '172.32.0.1', '100.128.0.1']) {
    expect([ip, isPublicAddress(ip)]).toEqual([ip, true])
  }
  expect(isPublicAddress('example.com')).toBe(false)
})

test('resolvePublic: every address public, or AddressRefused naming the inside one; literals are not resolved', async () => {
  const resolve = fixed({ 'public.test': ['93.184.216.34'], 'mixed.test': ['93.184.216.34', '10.0.0.1'], 'empty.test': [] })
  const strict = { resolve, allowPrivate: false }
  expect(await resolvePublic('public.test', strict)).toEqual(['93.184.216.34'])
  expect(await resolvePublic('8.8.8.8', strict)).toEqual(['8.8.8.8'])
  const refused = await resolvePublic('mixed.test', strict).catch((err: Error) => err)
  expect(refused).toBeInstanceOf(AddressRefused)
  expect((refused as Error).message).toBe('mixed.test resolves to a non-public address (10.0.0.1)')
  expect(await resolvePublic('::1', strict).catch((err: Error) => err)).toBeInstanceOf(AddressRefused)
  expect(((await resolvePublic('empty.test', strict).catch((err: Error) => err)) as Error).message).toBe('empty.test does not resolve')
  expect(((await resolvePublic('nowhere.test', strict).catch((err: Error) => err)) as Error).message).toBe('ENOTFOUND nowhere.test')
  // The test-only switch lifts the address rule, not resolution.
  expect(await resolvePublic('mixed.test', { resolve, allowPrivate: true })).toEqual(['93.184.216.34', '10.0.0.1'])
})

test('checkedLookup answers in both of node’s callback forms, or with the refusal', async () => {
  const lookup = checkedLookup({
    resolve: fixed({ 'public.test': ['93.184.216.34', '2606:4700:4700::1111'], 'loop.test': ['127.0.0.1'] }),
    allowPrivate: false,
  })
  const call = (host: string, all: boolean) =>
    new Promise<{ err: Error | null; address: unknown; family?: number }>((resolve) =>
      lookup(host, { all }, (err, address, family) => resolve({ err, address, family })),
    )
  expect(await call('public.test', false)).toEqual({ err: null, address: '93.184.216.34', family: 4 })
  expect(await call('public.test', true)).toEqual({
    err: null,
    address: [
      { address: '93.184.216.34', family: 4 },
      { address: '2606:4700:4700::1111', family: 6 },
    ],
    family: undefined,
  })
  const refused = await call('loop.test', true)
  expect(refused.err).toBeInstanceOf(AddressRefused)
  expect(refused.address).toEqual([])
})
