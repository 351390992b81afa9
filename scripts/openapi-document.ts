import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ProcessDriver } from '../sandbox/process'
import { loadConfig } from '../src/config'
import { sandboxScope, startServices } from '../src/server'

/**
 * The OpenAPI document of a freshly started agentd (a temp DATA_DIR, the process driver). A fresh
 * process's, because Elysia completes shared route schemas in place as it compiles their
 * validators on first use, so a long-running server's document can gain `additionalProperties`
 * after its first requests.
 */
export async function openApiDocument(): Promise<Record<string, unknown>> {
  const dir = mkdtempSync(join(tmpdir(), 'agentd-openapi-'))
  try {
    const services = await startServices(loadConfig({ DATA_DIR: dir }), {
      log: () => {},
      driver: new ProcessDriver({ scope: sandboxScope(dir), cgroups: false }),
    })
    const res = await services.app.handle(new Request('http://localhost/openapi.json'))
    const doc = (await res.json()) as Record<string, unknown>
    await services.close()
    return doc
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}
