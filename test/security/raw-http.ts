/**
 * A raw HTTP/1.1 client for the edge attacks, run as its own process at a raised priority (see
 * `rawHttp` below) so that what it measures is the server's answer, not the test's own event loop. Reads one plan as JSON on stdin, prints one result per request as JSON on stdout.
 *
 * A request is `head` (request line and headers, without the blank line) and a body: `text` sent
 * whole, or `stream` sent chunked, `chunkBytes` at a time up to `totalBytes`, optionally pausing
 * after the first chunk until the answer is in (`pauseForAnswer`): an answer that arrives then was
 * given without the rest of the body.
 */
import { connect, type Socket } from 'node:net'

export interface RawRequest {
  head: string
  text?: string
  stream?: { chunkBytes: number; totalBytes: number; pauseForAnswer?: boolean }
  /** Send it this many times, one connection each (the first ones warm the route up). */
  times?: number
}

export interface RawResult {
  status: number
  body: string
  /** From the first byte written to the whole answer read. */
  ms: number
  /** Body bytes written when the answer was complete, and in all. */
  sentAtAnswer: number
  sentTotal: number
  /** The server ended the connection before the client finished sending. */
  cutOff: boolean
}

const DEADLINE_MS = 30_000
/** A head goes out one byte per character, as HTTP/1.1 reads it: `\u00a0` is the byte 0xA0. */
const latin1 = (head: string) => Buffer.from(head, 'latin1')

function once(port: number, request: RawRequest): Promise<RawResult> {
  return new Promise((resolve, reject) => {
    let received = Buffer.alloc(0)
    let answered: { status: number; body: string; ms: number; sentAtAnswer: number } | null = null
    let sent = 0
    let closed = false
    let t0 = 0
    let wake: (() => void) | null = null
    const poke = () => {
      const w = wake
      wake = null
      w?.()
    }
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error(`no answer within ${DEADLINE_MS} ms (sent ${sent} body bytes): ${received.toString('latin1').slice(0, 200)}`))
    }, DEADLINE_MS)

    const tryAnswer = () => {
      if (answered) return
      const text = received.toString('latin1')
      const end = text.indexOf('\r\n\r\n')
      if (end < 0) return
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(text.slice(0, end))
      const body = received.subarray(end + 4)
      // No Content-Length (Bun's own bare refusals): the answer ends with the connection.
      if (length ? body.length < Number(length[1]) : !closed) return
      answered = { status: Number(text.slice(9, 12)), body: body.toString('utf8'), ms: performance.now() - t0, sentAtAnswer: sent }
      poke()
    }

    const socket: Socket = connect(port, '127.0.0.1', async () => {
      t0 = performance.now()
      const write = (data: string | Uint8Array) =>
        new Promise<void>((done) => {
          if (closed) return done()
          if (socket.write(data)) return done()
          wake = done
          socket.once('drain', poke)
        })
      const { stream, text } = request
      if (!stream) {
        const body = Buffer.from(text ?? '')
        await write(latin1(`${request.head}\r\n${text === undefined ? '' : `content-length: ${body.length}\r\n`}\r\n`))
        await write(body)
        sent = body.length
      } else {
        await write(latin1(`${request.head}\r\ntransfer-encoding: chunked\r\n\r\n`))
        const chunk = Buffer.alloc(stream.chunkBytes, 'x')
        while (sent < stream.totalBytes && !closed) {
          await write(`${chunk.length.toString(16)}\r\n`)
          await write(chunk)
          await write('\r\n')
          sent += chunk.length
          if (stream.pauseForAnswer && sent === chunk.length) {
            // Wait for the answer before sending more: the server must not need the rest.
            while (!answered && !closed) await new Promise<void>((w) => (wake = w))
          }
        }
        if (!closed) await write('0\r\n\r\n')
      }
      while (!answered && !closed) await new Promise<void>((w) => (wake = w))
      // The answer is in; wait for the connection to end only if the server is ending it.
      if (!closed) socket.end()
    })
    socket.on('data', (data: Buffer) => {
      received = Buffer.concat([received, data])
      tryAnswer()
    })
    const finish = () => {
      if (closed) return
      closed = true
      tryAnswer()
      poke()
      clearTimeout(timer)
      if (!answered) return reject(new Error(`connection closed without an answer (sent ${sent} body bytes)`))
      const total = request.stream?.totalBytes ?? Buffer.byteLength(request.text ?? '')
      resolve({ ...answered, sentTotal: sent, cutOff: sent < total })
    }
    socket.on('close', finish)
    socket.on('error', finish)
  })
}

/**
 * Sends `requests` to `127.0.0.1:port` from a separate process at a raised priority (like
 * watchHealth), one after the other; every run of every request, in order.
 */
export async function rawHttp(port: number, requests: RawRequest[]): Promise<RawResult[][]> {
  const proc = Bun.spawn(['nice', '-n', '-10', process.execPath, import.meta.path], { stdin: 'pipe', stdout: 'pipe', stderr: 'pipe' })
  proc.stdin.write(JSON.stringify({ port, requests }))
  await proc.stdin.end()
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  if (code !== 0) throw new Error(`raw HTTP client failed (${code}): ${err.slice(0, 1000)}`)
  return JSON.parse(out) as RawResult[][]
}

if (import.meta.main) {
  const plan = JSON.parse(await Bun.stdin.text()) as { port: number; requests: RawRequest[] }
  const results: RawResult[][] = []
  for (const request of plan.requests) {
    const runs: RawResult[] = []
    for (let i = 0; i < (request.times ?? 1); i++) runs.push(await once(plan.port, request))
    results.push(runs)
  }
  process.stdout.write(JSON.stringify(results))
}
