import { existsSync, readFileSync, realpathSync } from 'node:fs'
import { dirname, join } from 'node:path'

/**
 * Which runsc agentd runs. scripts/system-deps.sh builds a current one from gVisor's Go module (a
 * pinned pseudo-version of its `go` branch) into BUILT_RUNSC_DIR and points BUILT_RUNSC at it;
 * agentd prefers it over a runsc on PATH (Debian's, from 2022, which runs only on the ptrace
 * platform). AGENTD_RUNSC names another binary (tests keep Debian's build honest with it).
 */
export const BUILT_RUNSC_DIR = '/usr/local/lib/agentd'
/** A link to the newest build: `runsc-<pseudo-version>/runsc`, with a VERSION file beside it. */
export const BUILT_RUNSC = join(BUILT_RUNSC_DIR, 'runsc')

export interface RunscBinary {
  path: string
  /** The module's pseudo-version for a build of ours, else what `runsc --version` says. */
  version: string
  source: 'AGENTD_RUNSC' | 'gvisor.dev/gvisor module' | 'PATH'
  /**
   * The platform it runs sandboxes on (agentd passes none, so runsc's default): systrap since
   * gVisor's 2023 releases, ptrace before (Debian's build of 2022).
   */
  platform: 'systrap' | 'ptrace'
}

let chosen: RunscBinary | null | undefined

/** The runsc to run, or null when none is installed. Decided once per process. */
export function runscBinary(): RunscBinary | null {
  if (chosen !== undefined) return chosen
  const named = process.env.AGENTD_RUNSC
  // Named but not there: no runsc (the start-up says so), never another one in its place.
  if (named) return (chosen = existsSync(named) ? described(named, reportedVersion(named), 'AGENTD_RUNSC') : null)
  if (existsSync(BUILT_RUNSC)) {
    const path = realpathSync(BUILT_RUNSC)
    return (chosen = described(path, readText(join(dirname(path), 'VERSION')) ?? reportedVersion(path), 'gvisor.dev/gvisor module'))
  }
  const found = Bun.which('runsc')
  return (chosen = found ? described(found, reportedVersion(found), 'PATH') : null)
}

function described(path: string, version: string, source: RunscBinary['source']): RunscBinary {
  // Debian's packages name gVisor's releases `0.0~<yyyymmdd>`; module builds `v0.0.0-<yyyymmddhhmmss>-<commit>`.
  const date = /(?:0\.0~|v0\.0\.0-)(\d{8})/.exec(version)?.[1]
  return { path, version, source, platform: date !== undefined && date < '20230101' ? 'ptrace' : 'systrap' }
}

/**
 * The runsc for a command line: `runsc` for the one on PATH (as found by each spawn, and so named
 * in process lists, as before), the full path of one named or built; `runsc` when none is
 * installed (the command then fails, saying so).
 */
export function runscPath(): string {
  const binary = runscBinary()
  return !binary || binary.source === 'PATH' ? 'runsc' : binary.path
}

/** The first line of `runsc --version` ("runsc version 0.0~20221219.0"), its version word. */
function reportedVersion(path: string): string {
  try {
    const out = Bun.spawnSync([path, '--version'], { stdout: 'pipe', stderr: 'ignore', timeout: 10_000 }).stdout.toString()
    return /runsc version (\S+)/.exec(out)?.[1] ?? 'unknown'
  } catch {
    return 'unknown'
  }
}

function readText(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim() || null
  } catch {
    return null
  }
}
