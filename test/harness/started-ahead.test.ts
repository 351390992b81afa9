import { afterAll, expect, test } from 'bun:test'
import { startedAheadArgv, startedAheadEnv } from '../../src/harness/common'

/**
 * The feeding shell of a CLI started ahead (startedAheadArgv), run for real with bash and curl on
 * this host, `cat` standing for the CLI: it asks the gateway again on 204, hands a 200 read whole to
 * the CLI's stdin (after the prime), and kills the CLI on anything else, a body cut short included,
 * so no CLI answers a message it did not get whole.
 */
let asks = 0
const answers: Record<string, (req: Request) => Response> = {
  '/whole': () => new Response('the message\n'),
  '/again': () => (++asks < 3 ? new Response(null, { status: 204 }) : new Response('after asking again\n')),
  '/gone': () => new Response('no started CLI waits under this key\n', { status: 404 }),
}
const seenKeys: string[] = []
const gateway = Bun.serve({
  port: 0,
  hostname: '127.0.0.1',
  fetch(req) {
    seenKeys.push(req.headers.get('authorization') ?? '')
    return answers[new URL(req.url).pathname]!(req)
  },
})
// A body cut short: 64 bytes promised, 10 sent, then the connection ends.
const cutting = Bun.listen({
  hostname: '127.0.0.1',
  port: 0,
  socket: {
    data(socket) {
      socket.write('HTTP/1.1 200 OK\r\ncontent-length: 64\r\n\r\nfirst part')
      socket.end()
    },
  },
})
afterAll(() => {
  gateway.stop(true)
  cutting.stop(true)
})

async function run(path: string, prime = ''): Promise<{ out: string; code: number | null; signal: string | null }> {
  const argv = startedAheadArgv(['cat'], prime)
  expect(argv.join(' ')).not.toContain('gw_key_secret') // the key is never in an argv
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin', ...startedAheadEnv(gateway.url.origin, 'gw_key_secret') }
  env.AGENTD_FIRST_MESSAGE_URL = path === '/cut' ? `http://127.0.0.1:${cutting.port}/cut` : `${gateway.url.origin}${path}`
  const proc = Bun.spawn(argv, { env, stdout: 'pipe', stderr: 'pipe' })
  const out = await new Response(proc.stdout).text()
  await proc.exited
  return { out, code: proc.exitCode, signal: proc.signalCode === null ? null : String(proc.signalCode) }
}

test('a 200 read whole is the CLI’s stdin, after the prime; the key goes as a bearer token', async () => {
  expect(await run('/whole', '\n')).toEqual({ out: '\nthe message\n', code: 0, signal: null })
  expect(seenKeys.at(-1)).toBe('Bearer gw_key_secret')
})

test('204 means ask again', async () => {
  expect(await run('/again')).toEqual({ out: 'after asking again\n', code: 0, signal: null })
  expect(asks).toBe(3)
})

test('a 404, or a body cut short, kills the CLI with nothing of the message given', async () => {
  for (const path of ['/gone', '/cut']) {
    const { out, signal } = await run(path, '\n')
    expect({ path, out: out.replace('\n', ''), signal }).toEqual({ path, out: '', signal: 'SIGKILL' })
  }
})
