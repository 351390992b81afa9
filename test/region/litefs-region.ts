import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll } from 'bun:test'
import type { Subprocess } from 'bun'
import { adminWith, type RunningServer, startServer } from '../helpers/server'
import { removeDataDir } from '../helpers/cleanup'
import { skipAllowed } from '../sandbox/helpers'

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

/** Why this file's region tests skip (never under CI, where a missing LiteFS fails them), said once. */
export function regionSkip(): string | null {
  const skip = skipAllowed(regionUnavailable())
  if (skip) console.warn(`test/region: skipped (${skip})`)
  return skip
}

export type Region = Awaited<ReturnType<typeof startRegion>>

/**
 * The region of the enclosing describe: started before its tests, stopped after them. The getter
 * gives it, and `call` calls node i's agentd as the region's admin (JSON in and out).
 */
export function useRegion(count: number, env: Record<string, string>) {
  let region: Region
  beforeAll(async () => {
    region = await startRegion(count, env)
  }, 120_000)
  afterAll(async () => {
    await region?.[Symbol.asyncDispose]()
  }, 60_000)
  const call = async (node: number, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${region.nodes[node]!.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${region.adminToken}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        ...headers,
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    return { status: res.status, headers: res.headers, body: (res.status === 204 ? null : await res.json()) as any }
  }
  return { region: () => region, call }
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
 * cluster token. Org `acme` and its admin are made through the primary. `promote` and `follow`
 * move the static lease by hand, as an operator would.
 */
export async function startRegion(count: number, env: Record<string, string> = {}) {
  const root = mkdtempSync(join(tmpdir(), 'agentd-region-'))
  const token = `${crypto.randomUUID()}${crypto.randomUUID()}`
  const litefsPorts = Array.from({ length: count }, freePort)
  const agentdPorts = Array.from({ length: count }, freePort)
  const nodes: RegionNode[] = []
  const dirOf = (i: number) => join(root, `n${i + 1}`)
  const mountOf = (i: number) => join(dirOf(i), 'litefs')
  const envOf = (i: number) => ({
    ...env,
    DATA_DIR: join(dirOf(i), 'data'),
    AGENTD_DB_DIR: mountOf(i),
    AGENTD_NODE: `n${i + 1}`,
    AGENTD_NODE_URL: `http://127.0.0.1:${agentdPorts[i]}`,
    AGENTD_CLUSTER_TOKEN: token,
    PORT: String(agentdPorts[i]),
  })
  /** Mounts node i's LiteFS with the lease held by node `primary`. */
  const mountLiteFs = async (i: number, primary: number): Promise<Subprocess> => {
    mkdirSync(mountOf(i), { recursive: true })
    writeFileSync(
      join(dirOf(i), 'litefs.yml'),
      [
        `fuse:\n  dir: "${mountOf(i)}"`,
        `data:\n  dir: "${join(dirOf(i), 'litefs-data')}"`,
        `http:\n  addr: "127.0.0.1:${litefsPorts[i]}"`,
        'lease:',
        '  type: "static"',
        `  hostname: "n${primary + 1}"`,
        `  candidate: ${i === primary}`,
        `  advertise-url: "http://127.0.0.1:${litefsPorts[primary]}"`,
        '',
      ].join('\n'),
    )
    const proc = Bun.spawn([LITEFS, 'mount', '-config', join(dirOf(i), 'litefs.yml')], { stdout: 'ignore', stderr: 'ignore' })
    const deadline = Date.now() + 15_000
    while (!existsSync(join(mountOf(i), '.lag')) || (i === primary) === existsSync(join(mountOf(i), '.primary'))) {
      if (Date.now() > deadline) throw new Error(`LiteFS of n${i + 1} did not mount as ${i === primary ? 'primary' : 'replica'}`)
      await Bun.sleep(20)
    }
    return proc
  }
  /** Stops node i's LiteFS (SIGKILL: a machine lost), and its FUSE mount with it. */
  const unmountLiteFs = async (i: number, signal: NodeJS.Signals = 'SIGTERM') => {
    const node = nodes[i]
    if (node) {
      node.litefs.kill(signal)
      await node.litefs.exited
    }
    // A LiteFS killed before it unmounted leaves its FUSE mount behind: lazily unmounted.
    Bun.spawnSync(['fusermount3', '-uz', mountOf(i)], { stderr: 'ignore' })
  }
  const startNode = async (i: number, litefs: Subprocess) => {
    const server = await startServer(envOf(i))
    nodes[i] = { name: `n${i + 1}`, mount: mountOf(i), dataDir: envOf(i).DATA_DIR, url: server.url, server, litefs }
  }
  const stopAll = async () => {
    for (const node of nodes) await node?.server.stop().catch(() => {})
    for (let i = 0; i < count; i++) await unmountLiteFs(i)
    for (let i = 0; i < count; i++) await removeDataDir(envOf(i).DATA_DIR)
    rmSync(root, { recursive: true, force: true })
  }
  try {
    const mounts: Subprocess[] = []
    for (let i = 0; i < count; i++) mounts.push(await mountLiteFs(i, 0))
    // The primary first: it migrates the database, which the replicas wait for.
    for (let i = 0; i < count; i++) await startNode(i, mounts[i]!)
    const primary = envOf(0)
    const seed = (...args: string[]) => adminWith({ AGENTD_DB_DIR: primary.AGENTD_DB_DIR }, primary.DATA_DIR, ...args)
    await seed('org', 'create', 'acme')
    const created = await seed('user', 'create', '--org', 'acme', '--email', 'ada@acme.test', '--role', 'admin')
    if (created.code !== 0) throw new Error(`seeding the region failed: ${created.stderr}`)
    return {
      nodes,
      adminToken: created.json.token as string,
      clusterToken: token,
      /** Node i lost as a machine is: its agentd and its LiteFS killed. */
      async lose(i: number) {
        await nodes[i]!.server.stop('SIGKILL')
        await unmountLiteFs(i, 'SIGKILL')
      },
      /**
       * Moves the static lease to node i, as an operator does: its LiteFS restarted as the candidate
       * (its agentd sees its database go and exits 75, asking for a restart), then its agentd started again.
       */
      async promote(i: number): Promise<number | null> {
        await unmountLiteFs(i)
        const exit = await nodes[i]!.server.proc.exited
        await startNode(i, await mountLiteFs(i, i))
        return exit
      },
      /** Points node i's LiteFS at the primary `primary` (restarted), and its agentd again. */
      async follow(i: number, primary: number): Promise<number | null> {
        await unmountLiteFs(i)
        const exit = await nodes[i]!.server.proc.exited
        await startNode(i, await mountLiteFs(i, primary))
        return exit
      },
      [Symbol.asyncDispose]: stopAll,
    }
  } catch (err) {
    await stopAll()
    throw err
  }
}
