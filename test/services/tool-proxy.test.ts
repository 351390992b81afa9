import { afterAll, beforeAll, expect, test } from 'bun:test'
import { createServer, type Server } from 'node:net'
import { proxyToolRequest } from '../../src/connections/proxy'
import { poll } from '../helpers/poll'

/**
 * The egress proxy against a hostile tool server speaking broken HTTP: the exchange ends in a
 * 502 envelope, agentd does not crash, and the in-flight count is given back.
 */
let server: Server
let port: number
const answers: Record<string, string> = {
  '/odd-status': 'HTTP/1.1 999 Whatever\r\ncontent-length: 2\r\n\r\nhi',
  '/reset-content': 'HTTP/1.1 205 Reset Content\r\ncontent-length: 5\r\n\r\nhello',
  '/hang-up': '',
}
beforeAll(async () => {
  server = createServer((socket) => {
    socket.once('data', (chunk) => {
      const path = chunk.toString().split(' ')[1] ?? ''
      const answer = answers[path]
      if (!answer) return socket.destroy()
      socket.end(answer)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  port = (server.address() as { port: number }).port
})
afterAll(() => server.close())

test('odd statuses, a 205 with a body and a hang-up are answered, never thrown; each exchange is counted done once', async () => {
  const statuses: number[] = []
  let done = 0
  for (const path of ['/odd-status', '/reset-content', '/hang-up']) {
    const req = new Request('http://gateway/mcp/x', {
      method: 'POST',
      body: '{}',
      headers: { 'content-type': 'application/json', authorization: 'Bearer gateway-key' },
    })
    const res = await proxyToolRequest(
      req,
      { url: `http://127.0.0.1:${port}${path}`, token: 't' },
      { resolve: async () => ['127.0.0.1'], allowPrivate: true, onDone: () => done++ },
    )
    statuses.push(res.status)
    await res.arrayBuffer().catch(() => null)
  }
  expect(statuses).toEqual([502, 205, 502])
  // A 205's exchange ends when its upstream connection closes, after its answer was read.
  await poll('each exchange counted done', () => done >= 3, { timeoutMs: 5_000 })
  await Bun.sleep(50) // and only once
  expect(done).toBe(3)
})
