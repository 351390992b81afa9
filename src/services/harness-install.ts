/**
 * Pinned harness versions (`harness_3@0.60.0`): a CLI version other than the one bundled with
 * agentd is installed from npm on demand into DATA_DIR/harnesses/<package>@<version>, once, and
 * shared by every session that pins it. Sandboxes mount that directory read-only.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { ApiError, unprocessable } from '../domain/errors'
import { BUNDLED_MODULES, packageVersion } from '../harness/common'

/** What `npm view` / `npm install` print for a package or version that does not exist. */
const NOT_FOUND = /\b(E404|ETARGET)\b/

export class HarnessInstaller {
  private readonly installs = new Map<string, Promise<string>>()

  /** `root` is the cache directory (created here, so sandboxes can mount it from the start). */
  constructor(
    readonly root: string,
    private readonly npm = Bun.which('npm') ?? 'npm',
  ) {
    mkdirSync(root, { recursive: true })
  }

  /**
   * The exact version `wanted` (a version or a dist-tag such as `latest`) names on npm. A version
   * that does not exist is a 422 naming the package; a registry that cannot be reached is a 503.
   */
  async resolve(label: string, pkg: string, wanted: string): Promise<string> {
    if (packageVersion(BUNDLED_MODULES, pkg) === wanted) return wanted
    const { code, stdout, stderr } = await run([this.npm, 'view', `${pkg}@${wanted}`, 'version', '--json'])
    const versions = code === 0 ? parseVersions(stdout) : []
    if (code === 0 && versions.length === 0) throw notPublished(label, pkg, wanted)
    if (code !== 0) {
      if (NOT_FOUND.test(stdout) || NOT_FOUND.test(stderr)) throw notPublished(label, pkg, wanted)
      throw new ApiError(503, `${label}: the npm registry could not be asked for ${pkg}@${wanted} (${lastLine(stderr)})`)
    }
    // A range may match several versions; npm lists them in ascending order.
    return versions.at(-1)!
  }

  /** The node_modules directory holding `pkg@version`: agentd's own, or the cache's after installing. */
  modulesFor(pkg: string, version: string): Promise<string> {
    if (packageVersion(BUNDLED_MODULES, pkg) === version) return Promise.resolve(BUNDLED_MODULES)
    const key = `${pkg}@${version}`
    let install = this.installs.get(key)
    if (!install) {
      install = this.install(pkg, version)
      this.installs.set(key, install)
      // A failed install is retried by the next session rather than remembered.
      install.catch(() => this.installs.delete(key))
    }
    return install
  }

  private async install(pkg: string, version: string): Promise<string> {
    const dir = join(this.root, `${pkg.replace('/', '+')}@${version}`)
    const modules = join(dir, 'node_modules')
    if (packageVersion(modules, pkg) === version) return modules
    // Installed beside the target and renamed into place, so a crash or a concurrent agentd never
    // leaves a half-installed CLI where a session would run it.
    const staging = `${dir}.staging-${crypto.randomUUID()}`
    mkdirSync(staging, { recursive: true })
    try {
      const args = [this.npm, 'install', '--prefix', staging, '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--omit=dev', `${pkg}@${version}`]
      const { code, stderr } = await run(args)
      if (code !== 0) throw new Error(`npm install ${pkg}@${version} failed: ${lastLine(stderr)}`)
      if (packageVersion(join(staging, 'node_modules'), pkg) !== version) throw new Error(`npm install ${pkg}@${version} did not install it`)
      if (existsSync(dir)) rmSync(dir, { recursive: true, force: true })
      renameSync(staging, dir)
    } finally {
      rmSync(staging, { recursive: true, force: true })
    }
    return modules
  }
}

function notPublished(label: string, pkg: string, wanted: string): ApiError {
  return unprocessable(`${label}: ${pkg} has no published version "${wanted}"`, 'UNSUPPORTED_AGENT', 'error_code')
}

function parseVersions(stdout: string): string[] {
  try {
    const value: unknown = JSON.parse(stdout)
    if (typeof value === 'string') return [value]
    return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : []
  } catch {
    return []
  }
}

async function run(argv: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn(argv, { stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  return { code, stdout, stderr }
}

function lastLine(text: string): string {
  return text.trim().split('\n').filter((l) => !l.includes('npm warn')).at(-1) ?? 'no output'
}
