import { expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection, createServer, type AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { GatewayRelay } from '../../sandbox/relay'
import { poll } from '../helpers/poll'

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

/**
 * Before a gVisor sandbox is frozen the relay holds the gateway's bytes back and waits until the
 * sandbox side has read what was already passed (a frozen sentry lost bytes left in its socket).
 * The sandbox side is a real process (socat, as inside a sandbox) whose output is not read at
 * first, so it stops reading the relay's socket.
 */
test('hold: nothing more passes while held, hold waits for the reader to take what was passed, release passes the rest', async () => {
  const FIRST = 400_000 // far more than a pipe and a Unix socket hold: some waits unread
  let reply: (text: string) => void = () => {}
  const gateway = createServer((socket) => {
    socket.once('data', () => {
      socket.write(Buffer.alloc(FIRST, 'a'))
      reply = (text) => socket.end(text)
    })
  })
  await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve))
  const dir = mkdtempSync(join(tmpdir(), 'agentd-relay-'))
  const relay = new GatewayRelay(join(dir, 'r'), { host: '127.0.0.1', port: (gateway.address() as AddressInfo).port })
  await relay.start()
  // socat's output goes to a reader that starts reading once the file `go` exists.
  const go = join(dir, 'go')
  const sandbox = Bun.spawn(
    ['sh', '-c', `(printf 'POST /v1/responses HTTP/1.1\\r\\n\\r\\n'; sleep 30) | socat - "UNIX-CONNECT:$1" | (while [ ! -e "$2" ]; do sleep 0.02; done; cat)`, 'sandbox', relay.socketPath, go],
    { stdout: 'pipe', stderr: 'ignore' },
  )
  try {
    while (relay.connections === 0) await Bun.sleep(5)
    // The reply on its way: until some of it waits unread on the sandbox side, hold finds nothing to wait for.
    await poll('reply bytes unread on the sandbox side', async () => {
      const allRead = await relay.hold(0)
      if (allRead) relay.release()
      return !allRead
    })
    // Not read: hold says so at its deadline.
    expect(await relay.hold(200)).toBe(false)
    // Read: hold returns true once the sandbox side has taken all that was passed.
    let received = 0
    let tail = ''
    writeFileSync(go, '')
    void (async () => {
      for await (const chunk of sandbox.stdout) {
        received += chunk.length
        tail = (tail + new TextDecoder().decode(chunk)).slice(-16)
      }
    })()
    expect(await relay.hold(5000)).toBe(true)
    // What the relay had passed when the hold began (all of FIRST or, on a busy host, part of it:
    // the rest still waited in the gateway connection) is what the reader gets, and no more.
    const passed = relay.passedBytes
    expect(passed).toBeGreaterThan(0)
    expect(passed).toBeLessThanOrEqual(FIRST)
    // The gateway's end of the reply waits in the relay while held. (What socat took still goes
    // through its pipes to the reader: waited for, under load it took longer than 200 ms.)
    reply('the end')
    await poll('what was passed before the hold, read', () => received >= passed)
    await Bun.sleep(200)
    expect(received).toBe(passed)
    relay.release()
    await poll('the rest of the reply', () => received >= FIRST + 'the end'.length)
    expect(received).toBe(FIRST + 'the end'.length)
    expect(tail.endsWith('the end')).toBe(true)
  } finally {
    sandbox.kill('SIGKILL')
    await relay.stop()
    gateway.close()
    rmSync(dir, { recursive: true, force: true })
  }
})
