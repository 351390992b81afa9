/**
 * Pinned harness versions (`harness_3@0.60.0`): a CLI version other than the one bundled with
 * agentd is installed from npm on demand into DATA_DIR/harnesses/<package>@<version>, once, and
 * shared by every session that pins it. Sandboxes mount that directory read-only.
 *
 * What npm fetches is untrusted (CONTRACT section 7), so an install can't touch the host: no
 * package scripts (`--ignore-scripts`), npm itself as an unprivileged user (see installAsNobody)
 * in a temp folder of its own with a clean environment, under a time limit, one install at a time;
 * the result is copied into place by agentd, regular files, folders and symlinks only, owned by
 * root and writable by root alone.
 */
import {
  chmodSync,
  chownSync,
  closeSync,
  fstatSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  readSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeSync,
  constants as fs,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ApiError, unprocessable } from '../domain/errors'
import { BUNDLED_MODULES, packageVersion } from '../harness/common'

/** What `npm view` / `npm install` print for a package or version that does not exist. */
const NOT_FOUND = /\b(E404|ETARGET)\b/

/** An install that takes longer is killed and fails (a registry that trickles bytes holds nothing forever). */
const INSTALL_TIMEOUT_MS = 10 * 60_000

/**
 * The only variables of agentd's environment npm sees: how to reach the registry (proxies, the
 * registry and scoped registries, CA certificates). Not HOME, not tokens of other services.
 */
const PASSED_ENV = new RegExp(
  [
    'https?_proxy',
    'no_proxy',
    'npm_config_(.*registry|https?_proxy|proxy|noproxy|cafile|ca|strict_ssl)',
    'node_extra_ca_certs',
    'ssl_cert_(file|dir)',
  ]
    .map((name) => `^${name}$`)
    .join('|'),
  'i',
)

/**
 * No per-user npmrc (root's would not be readable by the install's user anyway): registry settings
 * come from PASSED_ENV variables or npm's global config, the same for `npm view` and installs.
 */
const NO_USER_CONFIG = '/nonexistent/agentd-npmrc'

export interface InstallerOptions {
  /** The npm binary (default: the one on PATH). */
  npm?: string
  /** Variables added to npm's environment (tests point it at a local registry). */
  env?: Record<string, string>
  timeoutMs?: number
}

/** An install's folder under the cache: `<package>@<version>`, a scope's slash as `+`. */
function installDirName(pkg: string, version: string): string {
  return `${pkg.replace('/', '+')}@${version}`
}

export class HarnessInstaller {
  private readonly installs = new Map<string, Promise<string>>()
  /** When this server last asked for each install (its folder name). */
  private readonly lastUsed = new Map<string, number>()
  /** Installs under way (their folder names): never pruned. */
  private readonly pending = new Set<string>()
  /** Installs run one after another: each is bounded in time, and npm is memory and disk hungry. */
  private queue: Promise<unknown> = Promise.resolve()
  private readonly npm: string
  private readonly env: Record<string, string>
  private readonly timeoutMs: number

  /** `root` is the cache directory (created here, so sandboxes can mount it from the start). */
  constructor(
    readonly root: string,
    options: InstallerOptions = {},
  ) {
    mkdirSync(root, { recursive: true })
    this.npm = options.npm ?? Bun.which('npm') ?? 'npm'
    this.timeoutMs = options.timeoutMs ?? INSTALL_TIMEOUT_MS
    const passed = Object.entries(process.env).filter(
      (entry): entry is [string, string] => PASSED_ENV.test(entry[0]) && entry[1] !== undefined,
    )
    this.env = { PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin', ...Object.fromEntries(passed), ...options.env }
  }

  /**
   * The exact version `wanted` (a version or a dist-tag such as `latest`) names on npm. A version
   * that does not exist is a 422 naming the package; a registry that cannot be reached is a 503.
   */
  async resolve(label: string, pkg: string, wanted: string): Promise<string> {
    if (packageVersion(BUNDLED_MODULES, pkg) === wanted) return wanted
    // Metadata only (nothing of the package runs), as agentd, with the same registry settings as installs.
    const env = { ...this.env, HOME: process.env.HOME ?? tmpdir(), npm_config_userconfig: NO_USER_CONFIG }
    const { code, stdout, stderr } = await run([this.npm, 'view', `${pkg}@${wanted}`, 'version', '--json'], env, 60_000)
    const versions = code === 0 ? parseVersions(stdout) : []
    if (code === 0 && versions.length === 0) throw notPublished(label, pkg, wanted)
    if (code !== 0) {
      if (NOT_FOUND.test(stdout) || NOT_FOUND.test(stderr)) throw notPublished(label, pkg, wanted)
      throw new ApiError('unavailable', `${label}: the npm registry could not be asked for ${pkg}@${wanted} (${lastLine(stderr)})`)
    }
    // A range may match several versions; npm lists them in ascending order.
    return versions.at(-1)!
  }

  /**
   * The node_modules directory holding `pkg@version`: agentd's own, or the cache's after installing.
   * Concurrent calls for one version share one install; installs of different versions queue.
   */
  modulesFor(pkg: string, version: string): Promise<string> {
    if (packageVersion(BUNDLED_MODULES, pkg) === version) return Promise.resolve(BUNDLED_MODULES)
    const key = `${pkg}@${version}`
    this.lastUsed.set(installDirName(pkg, version), Date.now())
    let install = this.installs.get(key)
    if (!install) {
      const name = installDirName(pkg, version)
      this.pending.add(name)
      install = this.queue.then(async () => {
        try {
          return await this.install(pkg, version)
        } finally {
          this.pending.delete(name)
        }
      })
      this.queue = install.catch(() => {})
      this.installs.set(key, install)
      // A failed install is retried by the next session rather than remembered.
      install.catch(() => this.installs.delete(key))
    }
    return install
  }

  /**
   * Deletes installs past the `keep` most recently used (by this server; an install it never used
   * counts by its folder's time) that no live session pins (`inUse`: `<package>@<version>`), and
   * staging folders a crash left. Callers pin versions at will, so without this the cache only
   * grows. An install in use is mounted in that session's sandbox: never deleted. Returns the names deleted.
   */
  prune(inUse: Set<string>, keep: number): string[] {
    const pinned = new Set(
      [...inUse].map((label) => installDirName(label.slice(0, label.lastIndexOf('@')), label.slice(label.lastIndexOf('@') + 1))),
    )
    for (const name of this.pending) pinned.add(name)
    const deleted: string[] = []
    const installs: { name: string; used: number }[] = []
    for (const name of readdirSync(this.root)) {
      const path = join(this.root, name)
      let mtimeMs: number
      try {
        mtimeMs = lstatSync(path).mtimeMs
      } catch {
        continue
      }
      if (name.includes('.staging-')) {
        if (mtimeMs < Date.now() - 60 * 60_000) rmSync(path, { recursive: true, force: true })
        continue
      }
      installs.push({ name, used: this.lastUsed.get(name) ?? mtimeMs })
    }
    installs.sort((a, b) => b.used - a.used)
    for (const { name } of installs.slice(Math.max(0, keep))) {
      if (pinned.has(name)) continue
      rmSync(join(this.root, name), { recursive: true, force: true })
      this.lastUsed.delete(name)
      // Asked for again, it is installed again.
      for (const key of this.installs.keys())
        if (installDirName(key.slice(0, key.lastIndexOf('@')), key.slice(key.lastIndexOf('@') + 1)) === name) this.installs.delete(key)
      deleted.push(name)
    }
    return deleted
  }

  private async install(pkg: string, version: string): Promise<string> {
    const dir = join(this.root, installDirName(pkg, version))
    const modules = join(dir, 'node_modules')
    if (packageVersion(modules, pkg) === version) return modules
    const work = mkdtempSync(join(tmpdir(), 'agentd-install-'))
    // Copied beside the target and renamed into place, so a crash or a concurrent agentd never
    // leaves a half-installed CLI where a session would run it.
    const staging = `${dir}.staging-${crypto.randomUUID()}`
    try {
      const prefix = await this.npmInstall(work, pkg, version)
      copyTree(prefix, staging, npmUser()?.uid ?? process.getuid?.() ?? 0)
      if (packageVersion(join(staging, 'node_modules'), pkg) !== version)
        throw new Error(`npm install ${pkg}@${version} did not install it`)
      rmSync(dir, { recursive: true, force: true })
      renameSync(staging, dir)
    } finally {
      rmSync(work, { recursive: true, force: true })
      rmSync(staging, { recursive: true, force: true })
    }
    return modules
  }

  /**
   * Runs `npm install --ignore-scripts` of `pkg@version` into `<work>/prefix`, as the unprivileged
   * user when agentd is root, with HOME, cache and config in `work`; returns the prefix.
   */
  private async npmInstall(work: string, pkg: string, version: string): Promise<string> {
    const prefix = join(work, 'prefix')
    const home = join(work, 'home')
    for (const path of [prefix, home]) mkdirSync(path)
    const user = npmUser()
    if (user) for (const path of [work, prefix, home]) chownSync(path, user.uid, user.gid)
    const env = {
      ...this.env,
      HOME: home,
      npm_config_cache: join(home, 'cache'),
      npm_config_userconfig: NO_USER_CONFIG,
      npm_config_update_notifier: 'false',
    }
    const install = [
      this.npm,
      'install',
      '--prefix',
      prefix,
      '--ignore-scripts',
      '--no-save',
      '--no-package-lock',
      '--no-audit',
      '--no-fund',
      '--omit=dev',
      `${pkg}@${version}`,
    ]
    const argv = user
      ? ['setpriv', `--reuid=${user.uid}`, `--regid=${user.gid}`, '--clear-groups', '--no-new-privs', '--', ...install]
      : install
    const { code, stderr } = await run(argv, env, this.timeoutMs, home)
    if (code !== 0) throw new Error(`npm install ${pkg}@${version} failed: ${lastLine(stderr)}`)
    return prefix
  }
}

/**
 * The user npm runs as when agentd is root: `nobody` (and `nogroup`, else nobody's own group).
 * Null when agentd is not root (it is unprivileged already and cannot switch).
 */
function npmUser(): { uid: number; gid: number } | null {
  if (process.getuid?.() !== 0) return null
  const field = (file: string, name: string, index: number) =>
    readFileSync(file, 'utf8')
      .split('\n')
      .map((line) => line.split(':'))
      .find((cols) => cols[0] === name)?.[index]
  const uid = Number(field('/etc/passwd', 'nobody', 2) ?? 65534)
  const gid = Number(field('/etc/group', 'nogroup', 2) ?? field('/etc/passwd', 'nobody', 3) ?? 65534)
  return { uid, gid }
}

/**
 * Copies the tree npm wrote (as another user) to `to`, owned by agentd, never writable by others:
 * folders 0755, files 0644 or 0755, symlinks as they are (never followed). Anything else, and any
 * file not owned by `owner` or with another hard link (a link to a file of the host's), is refused.
 */
function copyTree(from: string, to: string, owner: number): void {
  const stat = lstatSync(from)
  if (stat.isSymbolicLink()) return symlinkSync(readlinkSync(from), to)
  if (stat.uid !== owner) throw new Error(`npm install left ${from} owned by uid ${stat.uid}`)
  if (stat.isDirectory()) {
    mkdirSync(to, { mode: 0o755 })
    chmodSync(to, 0o755)
    for (const name of readdirSync(from)) copyTree(join(from, name), join(to, name), owner)
    return
  }
  if (!stat.isFile() || stat.nlink !== 1) throw new Error(`npm install left ${from}, which is not a plain file`)
  const source = openSync(from, fs.O_RDONLY | fs.O_NOFOLLOW)
  try {
    const opened = fstatSync(source)
    if (opened.ino !== stat.ino || opened.dev !== stat.dev) throw new Error(`${from} changed while it was copied`)
    const mode = opened.mode & 0o111 ? 0o755 : 0o644
    const target = openSync(to, fs.O_WRONLY | fs.O_CREAT | fs.O_EXCL | fs.O_NOFOLLOW, mode)
    try {
      const buffer = Buffer.allocUnsafe(1 << 20)
      for (let read: number; (read = readSync(source, buffer, 0, buffer.length, null)) > 0; ) writeSync(target, buffer, 0, read)
    } finally {
      closeSync(target)
    }
    chmodSync(to, mode)
  } finally {
    closeSync(source)
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

/** Runs `argv` in its own process group; past `timeoutMs` the whole group is killed and the run fails. */
async function run(
  argv: string[],
  env: Record<string, string>,
  timeoutMs: number,
  cwd = '/',
): Promise<{ code: number; stdout: string; stderr: string }> {
  const proc = Bun.spawn(argv, { env, cwd, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe', detached: true })
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    try {
      process.kill(-proc.pid, 'SIGKILL')
    } catch {
      proc.kill('SIGKILL')
    }
  }, timeoutMs)
  const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  clearTimeout(timer)
  if (timedOut)
    return {
      code: code || 124,
      stdout,
      stderr: `${stderr}\n${argv[0]} did not finish within ${Math.round(timeoutMs / 1000)} s and was stopped`,
    }
  return { code, stdout, stderr }
}

function lastLine(text: string): string {
  return (
    text
      .trim()
      .split('\n')
      .filter((l) => !l.includes('npm warn'))
      .at(-1) ?? 'no output'
  )
}
