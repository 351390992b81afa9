import { expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { createConnection, createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { GatewayRelay } from '../../sandbox/relay'

/**
 * The gateway hangs up right after a reply while the sandbox side is slow to read (a busy gVisor
 * sentry): the host relay must still hand over every byte before it ends that side. It used to
 * destroy it, and the CLI waited forever for a reply the gateway had sent.
 */
test('a reply the gateway sent before hanging up reaches a slow sandbox side whole', async () => {
  const REPLY = 4 * 1024 * 1024 // far more than a Unix socket buffers, so most of it waits in the relay
  const gateway = createServer((socket) => {
    socket.once('data', () => socket.end(Buffer.alloc(REPLY, 'r')))
  })
  await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve))
  const dir = mkdtempSync(join(tmpdir(), 'agentd-relay-'))
  const relay = new GatewayRelay(join(dir, 'r'), { host: '127.0.0.1', port: (gateway.address() as AddressInfo).port })
  await relay.start()
  try {
    for (let round = 0; round < 3; round++) {
      const received = await new Promise<number>((resolve, reject) => {
        const sandbox = createConnection({ path: relay.socketPath })
        let bytes = 0
        sandbox.on('connect', () => {
          sandbox.write('POST /v1/responses HTTP/1.1\r\n\r\n')
          // Reads nothing for a while: the gateway has long finished and hung up by then.
          sandbox.pause()
          setTimeout(() => sandbox.resume(), 300)
        })
        sandbox.on('data', (chunk) => (bytes += chunk.length))
        sandbox.on('end', () => resolve(bytes))
        sandbox.on('error', reject)
      })
      expect(received).toBe(REPLY)
    }
  } finally {
    await relay.stop()
    gateway.close()
    rmSync(dir, { recursive: true, force: true })
  }
})
