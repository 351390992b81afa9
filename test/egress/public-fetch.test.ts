import { afterAll, expect, test } from 'bun:test'
import { publicFetch } from '../../src/egress/public-fetch'

/**
 * The fetch agentd uses on a user's behalf towards servers someone else names (an OAuth
 * authorization server a tool server points at, and every endpoint its metadata lists), attacked:
 * inside addresses given literally or behind a name, plain http, and a redirect inward are each
 * refused before a byte is sent; a local listener shows nothing reached it.
 */
let connections = 0
const inside = Bun.listen({
  hostname: '127.0.0.1',
  port: 0,
  socket: {
    open(socket) {
      connections++
      socket.end()
    },
    data() {},
  },
})
const redirecting = Bun.serve({
  hostname: '127.0.0.1',
  port: 0,
  fetch: () => new Response(null, { status: 302, headers: { location: `http://127.0.0.1:${inside.port}/token` } }),
})
afterAll(() => {
  inside.stop(true)
  redirecting.stop(true)
})

const resolve = async (host: string) =>
  ({ 'auth.example.test': ['127.0.0.1'], 'meta.example.test': ['169.254.169.254'], 'mixed.example.test': ['93.184.216.34', '10.0.0.7'] })[
    host
  ] ?? []
const strict = publicFetch({ resolve, allowPrivate: false })
const reason = (promise: Promise<Response>) =>
  promise.then(
    (res) => `answered ${res.status}`,
    (err: Error) => err.message,
  )

test('inside addresses, literal or behind a name, and plain http are refused before anything is sent', async () => {
  const post = { method: 'POST', body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'secret' }) }
  expect(await reason(strict(`https://auth.example.test:${inside.port}/token`, post))).toContain(
    'auth.example.test resolves to a non-public address (127.0.0.1)',
  )
  expect(await reason(strict('https://meta.example.test/latest/meta-data', post))).toContain('non-public address (169.254.169.254)')
  expect(await reason(strict('https://mixed.example.test/token', post))).toContain('non-public address (10.0.0.7)')
  expect(await reason(strict('https://169.254.169.254/token', post))).toBe('169.254.169.254 is not a public address')
  expect(await reason(strict('https://[fd00:ec2::254]/token', post))).toBe('fd00:ec2::254 is not a public address')
  expect(await reason(strict(`http://auth.example.test:${inside.port}/token`, post))).toBe(
    `http://auth.example.test:${inside.port} is not an https URL`,
  )
  expect(connections).toBe(0)
})

test('a redirect is not followed (it could point inward); answers come back whole', async () => {
  const loose = publicFetch({ resolve, allowPrivate: true }) // the test switch, to reach the local server at all
  expect(await reason(loose(`http://127.0.0.1:${redirecting.port}/.well-known/oauth-authorization-server`))).toContain(
    'answered with a redirect (to http://127.0.0.1:',
  )
  expect(connections).toBe(0)
  const json = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    fetch: async (r) => Response.json({ got: await r.text(), type: r.headers.get('content-type') }),
  })
  try {
    const res = await loose(`http://127.0.0.1:${json.port}/token`, { method: 'POST', body: new URLSearchParams({ a: '1' }) })
    expect(await res.json()).toEqual({ got: 'a=1', type: 'application/x-www-form-urlencoded;charset=UTF-8' })
  } finally {
    json.stop(true)
  }
})
