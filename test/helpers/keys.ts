import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../../sandbox/process'
import { loadConfig } from '../../src/config'
import { sandboxScope, startServices, type ServerOptions } from '../../src/server'
import { sweepScope } from './cleanup'
import { req } from './http'

export type KeyApp = Awaited<ReturnType<typeof makeKeyApp>>

/**
 * makeTestApp with server options (DNS for webhook URLs, a clock): org `acme` with an admin, a
 * second admin and a member, org `other` with its own admin. Dispose it with `await using`.
 */
export async function makeKeyApp(env: Record<string, string> = {}, options: Omit<ServerOptions, 'driver' | 'log'> = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-keys-'))
  const config = loadConfig({ DATA_DIR: dir, ...env })
  // Its own scope, swept at dispose: parked sandboxes leave no cgroup behind on the machine.
  const driver = new ProcessDriver({ scope: sandboxScope(dir) })
  const services = await startServices(config, { driver, log: () => {}, ...options })
  await services.ready
  services.identity.createOrg('acme')
  services.identity.createOrg('other')
  const admin = services.identity.createUser('acme', 'admin@acme.test', 'admin')
  const admin2 = services.identity.createUser('acme', 'admin2@acme.test', 'admin')
  const member = services.identity.createUser('acme', 'member@acme.test', 'member')
  const stranger = services.identity.createUser('other', 'admin@other.test', 'admin')
  services.plans.setPlan('acme', { maxConcurrent: 50 })
  services.identity.createProject('acme', 'web', null)
  const call = async (method: string, path: string, token: string, body?: unknown) => {
    const res = await services.app.handle(req(method, path, { token, body }))
    const text = await res.text()
    return { status: res.status, body: text ? JSON.parse(text) : null }
  }
  return {
    ...services,
    dir,
    config,
    admin,
    admin2,
    member,
    stranger,
    call,
    /** A key created by `admin` (201 asserted by the caller through `status`). */
    async createKey(body: Record<string, unknown> = {}, token = admin.token) {
      return call('POST', '/o/acme/api-keys', token, { name: 'ci', ...body })
    },
    async [Symbol.asyncDispose]() {
      await services.close()
      await sweepScope(driver)
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

export interface ReceivedHook {
  headers: Record<string, string>
  body: string
  at: number
}

/**
 * A webhook receiver on 127.0.0.1. `answer(n)` decides the reply to the n-th request (1-based):
 * a status code, or `'hang'` to hold the request for `hangMs` without answering.
 */
export function startReceiver(answer: (n: number) => number | 'hang' | Response = () => 200, hangMs = 6_000) {
  const requests: ReceivedHook[] = []
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 30,
    async fetch(request) {
      const body = await request.text()
      requests.push({ headers: Object.fromEntries(request.headers), body, at: Date.now() })
      const reply = answer(requests.length)
      if (reply instanceof Response) return reply
      if (reply === 'hang') {
        await Bun.sleep(hangMs)
        return new Response('late', { status: 200 })
      }
      return new Response(reply < 300 ? 'ok' : 'no', { status: reply })
    },
  })
  return {
    url: `http://127.0.0.1:${server.port}/hook`,
    requests,
    stop: () => server.stop(true),
  }
}
