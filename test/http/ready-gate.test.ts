import { expect, test } from 'bun:test'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../../sandbox/process'
import { loadConfig } from '../../src/config'
import { startServices } from '../../src/server'
import { removeDataDir } from '../helpers/cleanup'
import { json, req } from '../helpers/http'

/** The process driver whose start-up sweep (the first step of rehydration) waits for the test. */
class SlowSweepDriver extends ProcessDriver {
  letGo!: () => void
  private readonly released = new Promise<void>((resolve) => (this.letGo = resolve))
  override async sweep(live: string[]): Promise<string[]> {
    await this.released
    return super.sweep(live)
  }
}

test('while a restart brings sessions back, /healthz says not ready and other requests get a clear 503, then are served', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-ready-'))
  const driver = new SlowSweepDriver({ scope: `ready-${crypto.randomUUID().slice(0, 8)}` })
  const services = await startServices(loadConfig({ DATA_DIR: dir }), { driver, log: () => {}, readyWaitMs: 100 })
  try {
    services.identity.createOrg('acme')
    const { token } = services.identity.createUser('acme', 'admin@acme.test', 'admin')
    expect(await json(await services.app.handle(req('GET', '/healthz')))).toEqual({
      ok: true,
      ready: false,
      role: 'primary',
      node: expect.any(String),
      txid: 0,
    })
    const waited = await services.app.handle(req('GET', '/o/acme/p/_/sessions', { token }))
    expect(waited.status).toBe(503)
    expect(await json(waited)).toMatchObject({ code: 'STARTING' })
    // Released within a request's wait: that request is answered normally.
    const during = services.app.handle(req('GET', '/o/acme/p/_/sessions', { token }))
    driver.letGo()
    expect((await during).status).toBe(200)
    await services.ready
    expect(await json(await services.app.handle(req('GET', '/healthz')))).toEqual({
      ok: true,
      ready: true,
      role: 'primary',
      node: expect.any(String),
      txid: 0,
    })
  } finally {
    driver.letGo()
    await services.close()
    await removeDataDir(dir)
  }
})
