import { afterAll, describe, expect, test } from 'bun:test'
import { createServer, type AddressInfo } from 'node:net'
import { BwrapDriver } from '../../sandbox/bwrap/driver'
import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import { GvisorDriver, gvisorWorks } from '../../sandbox/gvisor/driver'
import { AllowList } from '../../src/egress/allowlist'
import { EgressProxy } from '../../src/egress/proxy'
import { fakeGateway, hostSandboxSkipReason, removeScope, skipAllowed, specFor, tempRoot, testScope, text } from './helpers'

/**
 * A sandbox's egress hook on the real drivers: in a sandbox made with `egress`, a proxy request to
 * the gateway's port reaches the host's egress proxy, and through it an allowed host (here on the
 * host's loopback, so the proxy runs with `allowPrivate`); the gateway still answers on the same
 * port. A sandbox made without one, at the same time, gets 403 and reaches nothing.
 */
const skip = hostSandboxSkipReason()
if (skip) console.warn(`test/sandbox/egress: skipped (${skip})`)
const gvisorSkip = skip ?? skipAllowed(gvisorWorks() ? null : 'runsc does not work here')
if (!skip && gvisorSkip) console.warn(`test/sandbox/egress: gvisor skipped (${gvisorSkip})`)

const root = tempRoot()
const gateway = fakeGateway()
const origin = createServer((socket) => {
  socket.on('error', () => {})
  socket.once('data', (chunk: Buffer) =>
    socket.end(
      `HTTP/1.1 200 OK\r\nContent-Length: 18\r\nConnection: close\r\n\r\norigin saw ${chunk.toString('latin1').split(' ')[1]!.padEnd(7)}`,
    ),
  )
})
await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve))
const originPort = (origin.address() as AddressInfo).port
const scope = testScope()
afterAll(async () => {
  if (!skip) await new BwrapDriver({ scope }).sweep([])
  if (!gvisorSkip) await new GvisorDriver({ scope, log: () => {} }).sweep([])
  removeScope(scope)
  await root[Symbol.asyncDispose]()
  gateway[Symbol.dispose]()
  origin.close()
})

const drivers: [string, string | null, () => SandboxDriver][] = [
  ['bwrap', skip, () => new BwrapDriver({ scope })],
  ['gvisor', gvisorSkip, () => new GvisorDriver({ scope })],
]

for (const [kind, reason, make] of drivers) {
  describe.skipIf(reason !== null)(`${kind}: the egress hook`, () => {
    let driver: SandboxDriver
    let open: SandboxHandle
    let closed: SandboxHandle
    const lines: string[] = []
    const proxy = new EgressProxy({ resolve: async () => ['127.0.0.1'], allowPrivate: true })
    const allow = AllowList.parse([`allowed.test:${originPort}`])
    const curl = async (handle: SandboxHandle, url: string) => {
      const proc = driver.exec(handle, ['/usr/bin/curl', '-sS', '--max-time', '10', '-w', ' %{http_code}', url], {
        env: { PATH: '/usr/bin:/bin', HOME: handle.home, http_proxy: handle.gatewayUrl, NO_PROXY: '' },
      })
      const [out] = await Promise.all([text(proc.stdout), proc.exited])
      return out
    }

    test('a sandbox with the hook and one without start', async () => {
      driver = make()
      open = await driver.create(
        specFor(root.path, `${kind}-open`, gateway.port, {
          egress: (inner, head) => proxy.handle(inner, head, { allow, log: (line) => lines.push(line) }),
        }),
      )
      closed = await driver.create(specFor(root.path, `${kind}-closed`, gateway.port))
    })

    test('through the proxy: an allowed host is reached, another is 403 and logged; the gateway answers on the same port', async () => {
      expect(await curl(open, `http://allowed.test:${originPort}/x`)).toBe('origin saw /x      200')
      expect(await curl(open, 'http://example.com/')).toEndWith(' 403')
      expect(lines).toEqual(['egress denied: example.com:80'])
      const proc = driver.exec(open, ['/usr/bin/curl', '-sS', `${open.gatewayUrl}/v1/messages`], {
        env: { PATH: '/usr/bin:/bin', HOME: open.home },
      })
      expect(await text(proc.stdout)).toBe('gateway /v1/messages')
    })

    test('without the hook: 403, nothing reached', async () => {
      expect(await curl(closed, `http://allowed.test:${originPort}/x`)).toEndWith(' 403')
      expect(lines).toEqual(['egress denied: example.com:80'])
    })

    test('cleanup', async () => {
      await driver.destroy(open)
      await driver.destroy(closed)
    })
  })
}
