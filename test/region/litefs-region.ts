import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { adminWith, type RunningServer, startServer } from '../helpers/server'
import { removeDataDir } from '../helpers/cleanup'

/** The LiteFS that scripts/system-deps.sh builds for the tests (`--test`). */
export const LITEFS = '/usr/local/lib/agentd/litefs'

/** Why a region cannot run here, or null. */
export function regionUnavailable(): string | null {
  if (process.getuid?.() !== 0) return 'not root: LiteFS mounts FUSE'
  if (!existsSync(LITEFS)) return `no LiteFS at ${LITEFS} (sh scripts/system-deps.sh --test builds it)`
  if (!Bun.which('fusermount3')) return 'no fusermount3 (apt-get install fuse3)'
  if (!existsSync('/dev/fuse')) return 'no /dev/fuse'
  return null
}

/** A free TCP port on 127.0.0.1 (closed again at once). */
function freePort(): number {
  const server = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
  const port = server.port
  server.stop(true)
  return port
}

export interface RegionNode {
  name: string
  /** The LiteFS mount: AGENTD_DB_DIR. */
  mount: string
  dataDir: string
  url: string
  server: RunningServer
  litefs: Subprocess
}

/**
 * A region of `count` nodes on this machine, as the README's walk-through runs it: each its own
 * LiteFS (static lease, the first node primary) and its own agentd (DATA_DIR, port), sharing one
 * cluster token. Org `acme` and its admin are made through the primary.
 */
export async function startRegion(count: number, env: Record<string, string> = {}) {
  const root = mkdtempSync(join(tmpdir(), 'agentd-region-'))
  const token = `${crypto.randomUUID()}${crypto.randomUUID()}`
  const litefsPorts = Array.from({ length: count }, freePort)
  const agentdPorts = Array.from({ length: count }, freePort)
  const nodes: RegionNode[] = []
  const litefs: Subprocess[] = []
  const stopAll = async () => {
    for (const node of nodes) await node.server.stop().catch(() => {})
    for (const proc of litefs) {
      proc.kill('SIGTERM')
      await proc.exited
    }
    // A LiteFS killed before it unmounted leaves its FUSE mount behind: lazily unmounted.
    for (let i = 0; i < count; i++) Bun.spawnSync(['fusermount3', '-uz', join(root, `n${i + 1}`, 'litefs')], { stderr: 'ignore' })
    for (const node of nodes) await removeDataDir(node.dataDir)
    rmSync(root, { recursive: true, force: true })
  }
  try {
    for (let i = 0; i < count; i++) {
      const dir = join(root, `n${i + 1}`)
      const mount = join(dir, 'litefs')
      mkdirSync(mount, { recursive: true })
      writeFileSync(
        join(dir, 'litefs.yml'),
        [
          `fuse:\n  dir: "${mount}"`,
          `data:\n  dir: "${join(dir, 'litefs-data')}"`,
          `http:\n  addr: "127.0.0.1:${litefsPorts[i]}"`,
          'lease:',
          '  type: "static"',
          `  hostname: "n${i + 1}"`,
          `  candidate: ${i === 0}`,
          `  advertise-url: "http://127.0.0.1:${litefsPorts[0]}"`,
          '',
        ].join('\n'),
      )
      const proc = Bun.spawn([LITEFS, 'mount', '-config', join(dir, 'litefs.yml')], { stdout: 'ignore', stderr: 'ignore' })
      litefs.push(proc)
      const deadline = Date.now() + 15_000
      while (!existsSync(join(mount, '.lag'))) {
        if (Date.now() > deadline) throw new Error(`LiteFS of n${i + 1} did not mount`)
        await Bun.sleep(20)
      }
    }
    const envOf = (i: number) => ({
      ...env,
      DATA_DIR: join(root, `n${i + 1}`, 'data'),
      AGENTD_DB_DIR: join(root, `n${i + 1}`, 'litefs'),
      AGENTD_NODE: `n${i + 1}`,
      AGENTD_NODE_URL: `http://127.0.0.1:${agentdPorts[i]}`,
      AGENTD_CLUSTER_TOKEN: token,
      PORT: String(agentdPorts[i]),
    })
    // The primary first: it migrates the database, which the replicas wait for.
    for (let i = 0; i < count; i++) {
      const server = await startServer(envOf(i))
      nodes.push({
        name: `n${i + 1}`,
        mount: envOf(i).AGENTD_DB_DIR,
        dataDir: envOf(i).DATA_DIR,
        url: server.url,
        server,
        litefs: litefs[i]!,
      })
    }
    const primary = envOf(0)
    await adminWith({ AGENTD_DB_DIR: primary.AGENTD_DB_DIR }, primary.DATA_DIR, 'org', 'create', 'acme')
    const created = await adminWith(
      { AGENTD_DB_DIR: primary.AGENTD_DB_DIR },
      primary.DATA_DIR,
      'user',
      'create',
      '--org',
      'acme',
      '--email',
      'ada@acme.test',
      '--role',
      'admin',
    )
    if (created.code !== 0) throw new Error(`seeding the region failed: ${created.stderr}`)
    return { nodes, token, adminToken: created.json.token as string, clusterToken: token, [Symbol.asyncDispose]: stopAll }
  } catch (err) {
    await stopAll()
    throw err
  }
}
