import { describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createConnection, createServer, type AddressInfo, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { GatewayRelay, isProxyRequest } from '../../sandbox/relay'
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
    [
      'sh',
      '-c',
      `(printf 'POST /v1/responses HTTP/1.1\\r\\n\\r\\n'; sleep 30) | socat - "UNIX-CONNECT:$1" | (while [ ! -e "$2" ]; do sleep 0.02; done; cat)`,
      'sandbox',
      relay.socketPath,
      go,
    ],
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

test('isProxyRequest: CONNECT and absolute-form request lines are proxy requests, the gateway’s are not, a prefix waits', () => {
  const is = (text: string) => isProxyRequest(Buffer.from(text, 'latin1'))
  for (const text of [
    'CONNECT registry.npmjs.org:443 HTTP/1.1\r\n',
    'CONNECT ',
    'GET http://deb.debian.org/debian HTTP/1.1\r\n',
    'GET http://',
    'POST HTTP://x/ HTTP/1.1',
    'GET https://x/ HTTP/1.1',
  ]) {
    expect([text, is(text)]).toEqual([text, true])
  }
  for (const text of [
    'POST /v1/responses HTTP/1.1\r\n',
    'POST /',
    'GET / HTTP/1.1',
    'GET *',
    '\r\nCONNECT x:1 HTTP/1.1',
    ' CONNECT x:1',
    'CONNECTX x:1 HTTP/1.1',
    'GET http:x',
    'GET h/',
    'GET http\r\n',
    'X'.repeat(21),
    '\x16\x03\x01\x02\x00',
  ]) {
    expect([text, is(text)]).toEqual([text, false])
  }
  for (const text of ['', 'C', 'CONNECT', 'GET', 'GET ', 'GET h', 'GET http', 'GET http:', 'GET http:/']) {
    expect([text, is(text)]).toEqual([text, null])
  }
})

describe('one port, two services: the gateway and the egress proxy', () => {
  /** A gateway that answers with what it was sent; a relay with `egress`, or without. */
  async function world(egress?: (inner: Socket, head: Buffer) => void) {
    const gateway = createServer((socket) => {
      let got = ''
      socket.on('data', (chunk) => {
        got += chunk.toString()
        if (got.endsWith('\r\n\r\n')) socket.end(`gateway got: ${got}`)
      })
    })
    await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve))
    const dir = mkdtempSync(join(tmpdir(), 'agentd-relay-'))
    const relay = new GatewayRelay(
      join(dir, 'r'),
      { host: '127.0.0.1', port: (gateway.address() as AddressInfo).port },
      egress ? { egress } : {},
    )
    await relay.start()
    return {
      relay,
      async close() {
        await relay.stop()
        gateway.close()
        rmSync(dir, { recursive: true, force: true })
      },
    }
  }

  /** Sends `parts` one after the other (a pause between), and reads until the relay closes. */
  function send(path: string, parts: string[]): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = createConnection({ path })
      let answer = ''
      socket.on('connect', async () => {
        for (const part of parts) {
          socket.write(part)
          await Bun.sleep(30)
        }
      })
      socket.on('data', (chunk) => (answer += chunk.toString()))
      socket.on('close', () => resolve(answer))
      socket.on('error', reject)
    })
  }

  test('a gateway request reaches the gateway whole (sent in pieces too); CONNECT and absolute-form requests go to the hook', async () => {
    const heads: string[] = []
    const w = await world((inner, head) => {
      let got = head.toString()
      const whole = () => {
        if (!got.endsWith('\r\n\r\n')) return
        heads.push(got)
        inner.end('HTTP/1.1 200 Connection Established\r\n\r\n')
      }
      inner.on('data', (chunk) => {
        got += chunk.toString()
        whole()
      })
      inner.resume()
      whole()
    })
    try {
      const request = 'POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'
      expect(await send(w.relay.socketPath, [request])).toBe(`gateway got: ${request}`)
      expect(await send(w.relay.socketPath, ['PO', 'ST /v1/responses HTTP/1.1\r\n', 'Host: 127.0.0.1\r\n\r\n'])).toBe(
        `gateway got: ${request}`,
      )
      expect(heads).toEqual([])
      expect(await send(w.relay.socketPath, ['CONN', 'ECT registry.npmjs.org:443 HTTP/1.1\r\n\r\n'])).toBe(
        'HTTP/1.1 200 Connection Established\r\n\r\n',
      )
      expect(await send(w.relay.socketPath, ['GET http://deb.debian.org/debian/ HTTP/1.1\r\n\r\n'])).toBe(
        'HTTP/1.1 200 Connection Established\r\n\r\n',
      )
      expect(heads).toEqual(['CONNECT registry.npmjs.org:443 HTTP/1.1\r\n\r\n', 'GET http://deb.debian.org/debian/ HTTP/1.1\r\n\r\n'])
    } finally {
      await w.close()
    }
  })

  test('without a hook (a sandbox with no network) a proxy request is 403 and the gateway still answers', async () => {
    const w = await world()
    try {
      const refused = await send(w.relay.socketPath, ['CONNECT registry.npmjs.org:443 HTTP/1.1\r\n\r\n'])
      expect(refused).toStartWith('HTTP/1.1 403 Forbidden\r\n')
      expect(refused).toEndWith('this sandbox has no network\n')
      expect(await send(w.relay.socketPath, ['GET http://example.com/ HTTP/1.1\r\n\r\n'])).toStartWith('HTTP/1.1 403 Forbidden\r\n')
      const request = 'POST /v1/messages HTTP/1.1\r\n\r\n'
      expect(await send(w.relay.socketPath, [request])).toBe(`gateway got: ${request}`)
    } finally {
      await w.close()
    }
  })

  test('hold keeps what the egress proxy writes from the sandbox side until release; drain and stop close egress connections', async () => {
    let proxySide: Socket | null = null
    const w = await world((inner) => {
      proxySide = inner
      inner.write('HTTP/1.1 200 Connection Established\r\n\r\n')
    })
    try {
      const sandbox = createConnection({ path: w.relay.socketPath })
      let received = ''
      sandbox.on('data', (chunk) => (received += chunk.toString()))
      sandbox.write('CONNECT x.test:443 HTTP/1.1\r\n\r\n')
      await poll('the tunnel open', () => received.endsWith('\r\n\r\n'))
      expect(await w.relay.hold(1000)).toBe(true)
      proxySide!.write('while held')
      await Bun.sleep(200)
      expect(received).not.toContain('while held')
      expect(await w.relay.hold(0)).toBe(true) // held twice, released once
      w.relay.release()
      await poll('the bytes written while held', () => received.endsWith('while held'))
      expect(w.relay.connections).toBe(1)
      const closed = new Promise<void>((resolve) => sandbox.on('close', () => resolve()))
      sandbox.on('end', () => sandbox.end())
      expect(await w.relay.drain(2000)).toBe(true)
      await closed
    } finally {
      await w.close()
    }
  })
})

/**
 * Contract section 11: a gateway connection that passes no byte either way for the idle time is
 * closed, one a reply trickles through (a model thinking aloud, a keepalive) is not, and neither is
 * one whose relay is held (its sandbox frozen), until it has been idle that long after release.
 */
test('an idle gateway connection is closed; a trickling reply and a held relay keep it open', async () => {
  const IDLE_MS = 400
  const gateway = createServer((socket) => {
    socket.once('data', (chunk) => {
      if (!chunk.toString().startsWith('POST /trickle')) return // says nothing: idle
      const ticker = setInterval(() => socket.write('.'), IDLE_MS / 4)
      socket.on('close', () => clearInterval(ticker))
    })
  })
  await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve))
  const dir = mkdtempSync(join(tmpdir(), 'agentd-relay-'))
  const relay = new GatewayRelay(join(dir, 'r'), { host: '127.0.0.1', port: (gateway.address() as AddressInfo).port }, { idleMs: IDLE_MS })
  await relay.start()
  const open = (request: string) => {
    const socket = createConnection({ path: relay.socketPath })
    const state = { closedAt: 0, bytes: 0 }
    socket.on('data', (chunk) => (state.bytes += chunk.length))
    socket.on('close', () => (state.closedAt = performance.now()))
    socket.on('error', () => {})
    socket.write(request)
    return { socket, state }
  }
  try {
    const started = performance.now()
    const idle = open('POST /v1/messages HTTP/1.1\r\n')
    const trickle = open('POST /trickle HTTP/1.1\r\n\r\n')
    await poll('the idle connection closed', () => idle.state.closedAt > 0, { timeoutMs: 5_000 })
    expect(idle.state.closedAt - started).toBeGreaterThanOrEqual(IDLE_MS - 20)
    // The trickling one is open still, well past the idle time, its bytes flowing.
    await Bun.sleep(IDLE_MS * 2)
    expect(trickle.state.closedAt).toBe(0)
    expect(trickle.state.bytes).toBeGreaterThan(4)
    trickle.socket.destroy()

    // Held (its sandbox frozen), a quiet connection stays open past the idle time; released, it closes after it.
    const quiet = open('POST /v1/messages HTTP/1.1\r\n')
    await poll('the quiet connection relayed, the trickling one gone', () => relay.connections === 1 && relay.passedBytes === 0)
    expect(await relay.hold(1000)).toBe(true)
    await Bun.sleep(IDLE_MS * 3)
    expect(quiet.state.closedAt).toBe(0)
    const released = performance.now()
    relay.release()
    await poll('the quiet connection closed after release', () => quiet.state.closedAt > 0, { timeoutMs: 5_000 })
    expect(quiet.state.closedAt - released).toBeGreaterThanOrEqual(IDLE_MS - 20)
  } finally {
    await relay.stop()
    gateway.close()
    rmSync(dir, { recursive: true, force: true })
  }
})
