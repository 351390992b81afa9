import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { createConnection, createServer, type AddressInfo, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { AllowList } from '../../src/egress/allowlist'
import { EgressProxy, type EgressProxyOptions, type EgressSession } from '../../src/egress/proxy'
import type { ResolveHost } from '../../src/egress/address-policy'
import { GatewayRelay, RELAY_MAX_CONNECTIONS } from '../../sandbox/relay'
import { poll } from '../helpers/poll'
import { makeTestCa, type TestCa } from '../helpers/tls'

/**
 * The egress proxy on real sockets, all on 127.0.0.1: a sandbox's client (curl, or a raw socket)
 * talks to a front that hands each connection to the proxy as the sandbox's relay does, and the
 * proxy reaches origins on loopback, allowed there only by `allowPrivate`. The attack tests run
 * without it.
 */

const MARKER = 'plaintext-marker-8c1f'
let ca: TestCa
const closers: (() => void)[] = []
afterAll(() => {
  for (const close of closers.reverse()) close()
})

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  closers.push(() => server.close())
  return (server.address() as AddressInfo).port
}

/** A session whose log lines are kept. */
function session(entries: string[]): EgressSession & { lines: string[]; done: number } {
  const s = {
    allow: AllowList.parse(entries),
    lines: [] as string[],
    done: 0,
    log: (line: string) => s.lines.push(line),
    onDone: () => s.done++,
  }
  return s
}

/** Every name resolves to 127.0.0.1, or as `table` says. */
const resolver =
  (table: Record<string, string[]> = {}): ResolveHost =>
  async (host) =>
    table[host] ?? ['127.0.0.1']

/** A front on 127.0.0.1 passing each connection to `proxy` for `s`, as a sandbox's relay does. */
async function front(options: Partial<EgressProxyOptions>, s: EgressSession): Promise<number> {
  const proxy = new EgressProxy({ resolve: resolver(), allowPrivate: true, ...options })
  const server = createServer((socket) => {
    socket.once('data', (head: Buffer) => {
      socket.pause()
      proxy.handle(socket, head, s)
    })
  })
  return listen(server)
}

/** What a raw client gets for `text` at a TCP port on loopback, or a Unix socket's path: everything until the proxy closes (or `ms`). */
function exchange(at: number | string, text: string | Buffer, ms = 5000): Promise<{ answer: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = typeof at === 'number' ? createConnection({ host: '127.0.0.1', port: at }) : createConnection({ path: at })
    let answer = ''
    const timer = setTimeout(() => {
      socket.destroy()
      resolve({ answer, closed: false })
    }, ms)
    socket.on('connect', () => socket.write(text))
    socket.on('data', (chunk) => (answer += chunk.toString('latin1')))
    socket.on('error', () => {})
    socket.on('close', () => {
      clearTimeout(timer)
      resolve({ answer, closed: true })
    })
  })
}

/** An origin echoing what it gets, counting connections. */
async function echoOrigin(): Promise<{ port: number; connections: () => number; open: () => number }> {
  let connections = 0
  const sockets = new Set<Socket>()
  const server = createServer((socket) => {
    connections++
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
    socket.on('error', () => {})
    socket.on('data', (chunk) => socket.write(chunk))
  })
  const port = await listen(server)
  closers.push(() => {
    for (const socket of sockets) socket.destroy()
  })
  return { port, connections: () => connections, open: () => sockets.size }
}

async function curl(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const child = Bun.spawn(['curl', '-sS', '--max-time', '10', '--noproxy', '', ...args], {
    stdout: 'pipe',
    stderr: 'pipe',
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
  })
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited])
  return { code, out, err }
}

beforeAll(() => {
  ca = makeTestCa()
  closers.push(() => ca.remove())
})

describe('allowed', () => {
  test('CONNECT: curl reaches an https origin through the tunnel, and the proxy passes only ciphertext', async () => {
    const origin = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      tls: { cert: ca.cert, key: ca.key },
      fetch: (req) => new Response(`${MARKER} ${new URL(req.url).pathname}`),
    })
    closers.push(() => origin.stop(true))
    // A tap between the proxy and the origin keeps every byte the proxy relays, both ways.
    const relayed: Buffer[] = []
    const tap = createServer((socket) => {
      const upstream = createConnection({ host: '127.0.0.1', port: origin.port! })
      socket.on('data', (chunk: Buffer) => relayed.push(chunk))
      upstream.on('data', (chunk: Buffer) => relayed.push(chunk))
      socket.pipe(upstream).pipe(socket)
      socket.on('error', () => upstream.destroy())
      upstream.on('error', () => socket.destroy())
    })
    const tapPort = await listen(tap)
    const s = session([`localhost:${tapPort}`])
    const proxyPort = await front({}, s)
    const got = await curl([
      '--proxy',
      `http://127.0.0.1:${proxyPort}`,
      '--proxy-user',
      'agentd:token-in-proxy-url',
      '--cacert',
      ca.caFile,
      `https://localhost:${tapPort}/${MARKER}-path?secret=1`,
    ])
    expect(got.err).toBe('')
    expect(got.out).toBe(`${MARKER} /${MARKER}-path`)
    const seen = Buffer.concat(relayed)
    expect(seen[0]).toBe(0x16) // a TLS handshake record: the ClientHello went through as it was
    expect(seen.includes(MARKER)).toBe(false)
    expect(seen.includes('secret=1')).toBe(false)
    expect(s.lines).toEqual([])
    await poll('the tunnel closed and counted', () => s.done === 1)
  })

  test('CONNECT: bytes sent right after the head (a pipelined ClientHello) reach the host', async () => {
    const origin = await echoOrigin()
    const s = session([`tunnel.test:${origin.port}`])
    const port = await front({}, s)
    const { answer } = await exchange(
      port,
      `CONNECT tunnel.test:${origin.port} HTTP/1.1\r\nHost: tunnel.test:${origin.port}\r\n\r\nPIPELINED`,
      500,
    )
    expect(answer).toBe('HTTP/1.1 200 Connection Established\r\n\r\nPIPELINED')
  })

  test('plain http: origin form, Host from the URL, hop-by-hop and Proxy-* headers dropped, body and answer streamed, one request per connection', async () => {
    let received = ''
    const origin = createServer((socket) => {
      socket.on('data', (chunk) => {
        received += chunk.toString('latin1')
        if (received.endsWith('the body')) socket.end(`HTTP/1.1 201 Created\r\nContent-Length: 9\r\n\r\nfrom host`)
      })
    })
    const port = await listen(origin)
    const s = session([`plain.test:${port}`])
    const proxyPort = await front({}, s)
    const got = await curl([
      '--proxy',
      `http://127.0.0.1:${proxyPort}`,
      '--proxy-user',
      'agentd:sekrit',
      '-H',
      'X-Kept: yes',
      '-H',
      'Keep-Alive: timeout=5',
      '-H',
      'Connection: x-dropped',
      '-H',
      'X-Dropped: 1',
      '--data-binary',
      'the body',
      '-w',
      ' %{http_code}',
      `http://plain.test:${port}/p/a?token=abc`,
    ])
    expect(got.out).toBe('from host 201')
    const [head, body] = received.split('\r\n\r\n') as [string, string]
    const lines = head.split('\r\n')
    expect(lines[0]).toBe('POST /p/a?token=abc HTTP/1.1')
    expect(lines[1]).toBe(`Host: plain.test:${port}`)
    expect(lines).toContain('X-Kept: yes')
    expect(lines).toContain('Content-Length: 8')
    expect(lines.at(-1)).toBe('Connection: close')
    expect(head.toLowerCase()).not.toContain('proxy-')
    expect(head.toLowerCase()).not.toContain('keep-alive')
    expect(head.toLowerCase()).not.toContain('x-dropped')
    expect(head).not.toContain('sekrit')
    expect(body).toBe('the body')
    expect(s.lines).toEqual([])
  })
})

describe('refused', () => {
  test('a host or port not on the list: 403 and one log line naming host:port only', async () => {
    const s = session(['allowed.test', `*.example.com`])
    const port = await front({}, s)
    const denied = await exchange(port, 'CONNECT example.org:443 HTTP/1.1\r\nProxy-Authorization: Basic c2VrcmV0\r\n\r\n')
    expect(denied.answer).toStartWith('HTTP/1.1 403 Forbidden\r\n')
    expect(denied.closed).toBe(true)
    expect((await exchange(port, 'CONNECT allowed.test:8443 HTTP/1.1\r\n\r\n')).answer).toStartWith('HTTP/1.1 403 ')
    expect((await exchange(port, 'CONNECT example.com:443 HTTP/1.1\r\n\r\n')).answer).toStartWith('HTTP/1.1 403 ')
    expect(
      (await exchange(port, 'GET http://Example.ORG./x?key=s3cret HTTP/1.1\r\nAuthorization: Bearer t0ken\r\n\r\n')).answer,
    ).toStartWith('HTTP/1.1 403 ')
    expect(s.lines).toEqual([
      'egress denied: example.org:443',
      'egress denied: allowed.test:8443',
      'egress denied: example.com:443',
      'egress denied: example.org:80',
    ])
  })

  test('an allowed name that resolves to an inside address (all, or one of several) is refused and never connected to', async () => {
    const listener = await echoOrigin()
    const table = {
      'ten.test': ['10.0.0.1'],
      'loop.test': ['127.0.0.1'],
      'meta.test': ['169.254.169.254'],
      'mixed.test': ['93.184.216.34', '127.0.0.1'],
      'mapped.test': ['::ffff:127.0.0.1'],
    }
    const s = session(Object.keys(table).map((host) => `${host}:${listener.port}`))
    const port = await front({ resolve: resolver(table), allowPrivate: false }, s)
    for (const host of Object.keys(table)) {
      const { answer } = await exchange(port, `CONNECT ${host}:${listener.port} HTTP/1.1\r\n\r\n`)
      expect([host, answer.split('\r\n')[0]]).toEqual([host, 'HTTP/1.1 403 Forbidden'])
    }
    expect(s.lines).toEqual([
      `egress refused: ten.test:${listener.port} resolves to a non-public address (10.0.0.1)`,
      `egress refused: loop.test:${listener.port} resolves to a non-public address (127.0.0.1)`,
      `egress refused: meta.test:${listener.port} resolves to a non-public address (169.254.169.254)`,
      `egress refused: mixed.test:${listener.port} resolves to a non-public address (127.0.0.1)`,
      `egress refused: mapped.test:${listener.port} resolves to a non-public address (::ffff:127.0.0.1)`,
    ])
    expect(listener.connections()).toBe(0)
  })

  test('inside IP literals on the list stay unreachable: 127.0.0.1, 169.254.169.254, [::1], plain http too', async () => {
    const listener = await echoOrigin()
    const s = session([`127.0.0.1:${listener.port}`, '169.254.169.254', '[::1]:443', '10.1.2.3:80'])
    const port = await front({ allowPrivate: false }, s)
    for (const request of [
      `CONNECT 127.0.0.1:${listener.port} HTTP/1.1`,
      'CONNECT 169.254.169.254:443 HTTP/1.1',
      'CONNECT [::1]:443 HTTP/1.1',
      'GET http://169.254.169.254/latest/meta-data/ HTTP/1.1',
      'GET http://10.1.2.3/ HTTP/1.1',
    ]) {
      const { answer } = await exchange(port, `${request}\r\n\r\n`)
      expect([request, answer.split('\r\n')[0]]).toEqual([request, 'HTTP/1.1 403 Forbidden'])
    }
    expect(s.lines).toEqual([
      `egress refused: 127.0.0.1:${listener.port} is a non-public address`,
      'egress refused: 169.254.169.254:443 is a non-public address',
      'egress refused: [::1]:443 is a non-public address',
      'egress refused: 169.254.169.254:80 is a non-public address',
      'egress refused: 10.1.2.3:80 is a non-public address',
    ])
    expect(listener.connections()).toBe(0)
  })

  test('registries: registry.npmjs.org:443 passes the list (then the address check), example.com does not', async () => {
    const s = session(['registries'])
    const port = await front({ resolve: resolver({ 'registry.npmjs.org': ['127.0.0.1'] }), allowPrivate: false }, s)
    expect((await exchange(port, 'CONNECT registry.npmjs.org:443 HTTP/1.1\r\n\r\n')).answer).toStartWith('HTTP/1.1 403 ')
    expect((await exchange(port, 'CONNECT example.com:443 HTTP/1.1\r\n\r\n')).answer).toStartWith('HTTP/1.1 403 ')
    expect(s.lines).toEqual([
      'egress refused: registry.npmjs.org:443 resolves to a non-public address (127.0.0.1)',
      'egress denied: example.com:443',
    ])
  })

  test('malformed heads are 400, a head over 16 KiB is 431, and nothing is logged or connected', async () => {
    const origin = await echoOrigin()
    const s = session([`ok.test:${origin.port}`])
    const port = await front({}, s)
    const target = `ok.test:${origin.port}`
    for (const head of [
      `CONNECT ok.test HTTP/1.1\r\n\r\n`,
      `CONNECT ok.test:0 HTTP/1.1\r\n\r\n`,
      `CONNECT ${target} HTTP/2.0\r\n\r\n`,
      `CONNECT  ${target} HTTP/1.1\r\n\r\n`,
      `CONNECT ${target} HTTP/1.1\r\nno colon here\r\n\r\n`,
      `CONNECT ${target} HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n`,
      `CONNECT ${target} HTTP/1.1\r\nX-A: 1\nX-B: 2\r\n\r\n`,
      `GET /relative HTTP/1.1\r\nHost: ${target}\r\n\r\n`,
      `GET https://${target}/ HTTP/1.1\r\n\r\n`,
      `GET http://user@${target}/ HTTP/1.1\r\n\r\n`,
      `GET http://bad_host!:80/ HTTP/1.1\r\n\r\n`,
      `POST http://${target}/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n`,
      `POST http://${target}/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n`,
    ]) {
      const { answer } = await exchange(port, head)
      expect([head, answer.split('\r\n')[0]]).toEqual([head, 'HTTP/1.1 400 Bad Request'])
    }
    const big = await exchange(port, `CONNECT ${target} HTTP/1.1\r\nX-Big: ${'a'.repeat(16 * 1024)}\r\n\r\n`)
    expect(big.answer.split('\r\n')[0]).toBe('HTTP/1.1 431 Request Header Fields Too Large')
    expect(s.lines).toEqual([])
    expect(origin.connections()).toBe(0)
  })
})

describe('time and count limits', () => {
  test('a head not whole in time is closed without an answer', async () => {
    const s = session(['slow.test'])
    const port = await front({ headTimeoutMs: 300 }, s)
    const started = Date.now()
    const { answer, closed } = await exchange(port, 'CONNECT slow.test:443 HTTP/1.1\r\nX-A: 1\r\n', 5000)
    expect(closed).toBe(true)
    expect(answer).toBe('')
    expect(Date.now() - started).toBeGreaterThanOrEqual(250)
    await poll('onDone', () => s.done === 1)
  })

  test('a tunnel idle for the idle time is closed, both sides', async () => {
    const origin = await echoOrigin()
    const s = session([`idle.test:${origin.port}`])
    const port = await front({ idleMs: 300 }, s)
    const started = Date.now()
    const { answer, closed } = await exchange(port, `CONNECT idle.test:${origin.port} HTTP/1.1\r\n\r\nping`, 5000)
    expect(answer).toBe('HTTP/1.1 200 Connection Established\r\n\r\nping')
    expect(closed).toBe(true)
    expect(Date.now() - started).toBeGreaterThanOrEqual(250)
    expect(origin.connections()).toBe(1)
    await poll('the host side closed too', () => origin.open() === 0)
  })

  test(`through a sandbox's relay: the ${RELAY_MAX_CONNECTIONS + 1}th connection at once is closed at once, the ${RELAY_MAX_CONNECTIONS} open ones keep working`, async () => {
    const origin = await echoOrigin()
    const dir = mkdtempSync(join(tmpdir(), 'agentd-egress-'))
    closers.push(() => rmSync(dir, { recursive: true, force: true }))
    const s = session([`cap.test:${origin.port}`])
    const proxy = new EgressProxy({ resolve: resolver(), allowPrivate: true })
    // The gateway is never reached here: every connection is a proxy request.
    const relay = new GatewayRelay(
      join(dir, 'r'),
      { host: '127.0.0.1', port: 9 },
      { egress: (inner, head) => proxy.handle(inner, head, s) },
    )
    await relay.start()
    try {
      const tunnel = () =>
        new Promise<Socket>((resolve, reject) => {
          const socket = createConnection({ path: relay.socketPath })
          socket.on('error', reject)
          socket.once('connect', () => socket.write(`CONNECT cap.test:${origin.port} HTTP/1.1\r\n\r\n`))
          socket.once('data', (chunk) =>
            chunk.toString().startsWith('HTTP/1.1 200 ') ? resolve(socket) : reject(new Error(chunk.toString())),
          )
        })
      const open: Socket[] = []
      for (let i = 0; i < RELAY_MAX_CONNECTIONS; i++) open.push(await tunnel())
      expect(relay.connections).toBe(RELAY_MAX_CONNECTIONS)
      const started = Date.now()
      const extra = await exchange(relay.socketPath, `CONNECT cap.test:${origin.port} HTTP/1.1\r\n\r\n`)
      expect(extra).toEqual({ answer: '', closed: true })
      expect(Date.now() - started).toBeLessThan(1000)
      expect(origin.connections()).toBe(RELAY_MAX_CONNECTIONS)
      // Every one of the 64 still carries bytes both ways.
      const echoes = await Promise.all(
        open.map(
          (socket, i) =>
            new Promise<string>((resolve) => {
              socket.once('data', (chunk) => resolve(chunk.toString()))
              socket.write(`hello ${i}`)
            }),
        ),
      )
      expect(echoes).toEqual(open.map((_, i) => `hello ${i}`))
      // One closed: a new one is taken again.
      open.pop()!.destroy()
      await poll('the closed one let go of', () => relay.connections === RELAY_MAX_CONNECTIONS - 1)
      open.push(await tunnel())
      for (const socket of open) socket.destroy()
      await poll('every tunnel done', () => s.done === RELAY_MAX_CONNECTIONS + 1)
    } finally {
      await relay.stop()
    }
  })
})
