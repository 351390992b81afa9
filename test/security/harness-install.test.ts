/**
 * Attack: a pinned harness version whose npm package carries install scripts, meant to run as
 * root on the host when agentd installs it. A local registry serves such a package: the scripts
 * would write marker files (one where only root can write, one where anyone can). The install
 * works, no marker ever appears, npm runs as the unprivileged user, the result is root's and
 * writable by root alone, concurrent requests for one version run npm once, installs of two
 * versions never overlap, and an install that hangs is stopped at its time limit.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { createHash } from 'node:crypto'
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  utimesSync,
  writeFileSync,
  type Stats,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { HarnessInstaller } from '../../src/runtime/harness-install'

const PKG = `agentd-evil-cli-${crypto.randomUUID().slice(0, 8)}`
const work = mkdtempSync(join(tmpdir(), 'agentd-evil-registry-'))
/** Only root may write here; anyone may write there. */
const rootOnly = join(work, 'root-only')
const anyone = join(work, 'anyone')
const markers = [join(rootOnly, 'pwned'), join(anyone, 'pwned')]

/** What the registry saw: tarball downloads per version, and the uids of the npm processes alive at each. */
const downloads: Record<string, number> = {}
const npmUids: number[][] = []
let registry: ReturnType<typeof Bun.serve>
const tarballs: Record<string, Buffer> = {}

/** The npm install processes of PKG alive now, with their real uids. */
function npmProcesses(): { pid: string; uid: number }[] {
  const found: { pid: string; uid: number }[] = []
  for (const pid of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    try {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      if (!cmdline.includes(`${PKG}@`) || !cmdline.includes('install') || cmdline.startsWith('setpriv')) continue
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1])
      found.push({ pid, uid })
    } catch {
      // gone
    }
  }
  return found
}

/** A package tarball whose every install hook writes both markers. */
async function buildTarball(version: string): Promise<Buffer> {
  const dir = join(work, `build-${version}`)
  mkdirSync(join(dir, 'package'), { recursive: true })
  const hook = `node -e "for (const f of ${JSON.stringify(markers).replaceAll('"', "'")}) try { require('fs').writeFileSync(f, String(process.getuid())) } catch {}"`
  writeFileSync(
    join(dir, 'package', 'package.json'),
    JSON.stringify({
      name: PKG,
      version,
      bin: { evil: 'cli.js' },
      scripts: { preinstall: hook, install: hook, postinstall: hook, prepare: hook },
    }),
  )
  writeFileSync(join(dir, 'package', 'cli.js'), '#!/usr/bin/env node\nconsole.log("evil")\n')
  chmodSync(join(dir, 'package', 'cli.js'), 0o755)
  const tgz = join(dir, 'pkg.tgz')
  const tar = Bun.spawn(['tar', 'czf', tgz, '-C', dir, 'package'])
  expect(await tar.exited).toBe(0)
  return readFileSync(tgz)
}

beforeAll(async () => {
  // The unprivileged user may reach `anyone` (a script it ran could write there), never `rootOnly`.
  chmodSync(work, 0o755)
  mkdirSync(rootOnly, { mode: 0o700 })
  mkdirSync(anyone)
  chmodSync(anyone, 0o1777)
  for (const version of ['1.0.0', '2.0.0', '3.0.0']) tarballs[version] = await buildTarball(version)
  registry = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const url = new URL(req.url)
      const base = `http://127.0.0.1:${registry.port}`
      if (decodeURIComponent(url.pathname) === `/${PKG}`) {
        const versions: Record<string, unknown> = {}
        for (const [version, tgz] of Object.entries(tarballs)) {
          const manifest = JSON.parse(await Bun.spawn(['tar', 'xzOf', '-', 'package/package.json'], { stdin: tgz }).stdout.text())
          versions[version] = {
            ...manifest,
            dist: {
              tarball: `${base}/${PKG}/-/${PKG}-${version}.tgz`,
              shasum: createHash('sha1').update(tgz).digest('hex'),
              integrity: `sha512-${createHash('sha512').update(tgz).digest('base64')}`,
            },
          }
        }
        return Response.json({ name: PKG, 'dist-tags': { latest: '2.0.0' }, versions })
      }
      const tarball = new RegExp(`^/${PKG}/-/${PKG}-(.+)\\.tgz$`).exec(url.pathname)
      if (tarball) {
        const version = tarball[1]!
        downloads[version] = (downloads[version] ?? 0) + 1
        npmUids.push(npmProcesses().map((p) => p.uid))
        // 3.0.0 never finishes downloading: the install's time limit must stop it.
        if (version === '3.0.0') return new Response(new ReadableStream({ start() {} }))
        // Slow enough that a second install, if one ran at the same time, would be seen here.
        await Bun.sleep(300)
        return new Response(tarballs[version])
      }
      return new Response('{"error":"not found"}', { status: 404 })
    },
  })
})
afterAll(() => {
  registry?.stop(true)
  rmSync(work, { recursive: true, force: true })
})

const newInstaller = (timeoutMs?: number) =>
  new HarnessInstaller(mkdtempSync(join(work, 'harnesses-')), {
    env: { npm_config_registry: `http://127.0.0.1:${registry.port}/` },
    timeoutMs,
  })

/** Every path of a tree with its lstat. */
function walk(path: string): { path: string; stat: Stats }[] {
  const stat = lstatSync(path)
  return [{ path, stat }, ...(stat.isDirectory() ? readdirSync(path).flatMap((name) => walk(join(path, name))) : [])]
}

describe('pinned harness installs', () => {
  test('a package with install scripts installs without running them; npm runs unprivileged once for concurrent requests', async () => {
    const installer = newInstaller()
    expect(await installer.resolve(`x@latest`, PKG, 'latest')).toBe('2.0.0')
    // Three sessions pin 1.0.0 at once, one pins 2.0.0: one npm per version, never two at a time.
    const results = await Promise.all([
      installer.modulesFor(PKG, '1.0.0'),
      installer.modulesFor(PKG, '1.0.0'),
      installer.modulesFor(PKG, '2.0.0'),
      installer.modulesFor(PKG, '1.0.0'),
    ])
    expect(new Set(results).size).toBe(2)
    expect(downloads).toEqual({ '1.0.0': 1, '2.0.0': 1 })
    // At each download exactly one npm install was running, as the unprivileged user when we are root.
    const expectedUid = process.getuid!() === 0 ? 65534 : process.getuid!()
    expect(npmUids).toEqual([[expectedUid], [expectedUid]])
    // No install hook ran, as root or as anyone.
    for (const marker of markers) expect(existsSync(marker)).toBe(false)
    // It works: the CLI is there, and a later request runs no npm at all.
    const modules = results[0]!
    expect(JSON.parse(readFileSync(join(modules, PKG, 'package.json'), 'utf8')).version).toBe('1.0.0')
    expect(readFileSync(join(modules, PKG, 'cli.js'), 'utf8')).toContain('evil')
    expect(await installer.modulesFor(PKG, '1.0.0')).toBe(modules)
    expect(downloads['1.0.0']).toBe(1)
    // The installed tree is agentd's, and nobody else can write to it.
    const tree = walk(join(modules, '..'))
    expect(tree.length).toBeGreaterThan(3)
    for (const { path, stat } of tree) {
      expect(stat.uid, path).toBe(process.getuid!())
      if (!stat.isSymbolicLink()) expect(stat.mode & 0o022, path).toBe(0)
    }
    expect(lstatSync(join(modules, PKG, 'cli.js')).mode & 0o777).toBe(0o755)
    // Nothing but the installs in the cache (no staging folders left).
    expect(readdirSync(installer.root).sort()).toEqual([`${PKG}@1.0.0`, `${PKG}@2.0.0`])
  }, 120_000)

  test('an install that hangs is stopped at its time limit, leaving no npm behind', async () => {
    const installer = newInstaller(3_000)
    const started = Date.now()
    const error = await installer.modulesFor(PKG, '3.0.0').then(
      () => null,
      (err: Error) => err,
    )
    expect(error?.message).toContain('did not finish within 3 s')
    expect(Date.now() - started).toBeLessThan(60_000)
    expect(npmProcesses()).toEqual([])
    expect(readdirSync(installer.root)).toEqual([])
    for (const marker of markers) expect(existsSync(marker)).toBe(false)
  }, 90_000)

  test('callers pin version after version: installs past the most recently used are deleted, never one a live session runs; asked again, one is installed again', async () => {
    const installer = newInstaller()
    await installer.modulesFor(PKG, '1.0.0')
    await Bun.sleep(5)
    await installer.modulesFor(PKG, '2.0.0')
    // A staging folder a crash left an hour ago goes too.
    const stale = join(installer.root, `${PKG}@9.9.9.staging-old`)
    mkdirSync(stale)
    utimesSync(stale, new Date(Date.now() - 2 * 3600_000), new Date(Date.now() - 2 * 3600_000))
    expect(installer.prune(new Set(), 1)).toEqual([`${PKG}@1.0.0`])
    expect(readdirSync(installer.root).sort()).toEqual([`${PKG}@2.0.0`])
    // A version a live session runs stays whatever the count.
    expect(installer.prune(new Set([`${PKG}@2.0.0`]), 0)).toEqual([])
    expect(installer.prune(new Set(), 0)).toEqual([`${PKG}@2.0.0`])
    expect(readdirSync(installer.root)).toEqual([])
    const before = downloads['1.0.0'] ?? 0
    const modules = await installer.modulesFor(PKG, '1.0.0')
    expect(existsSync(join(modules, PKG, 'cli.js'))).toBe(true)
    expect(downloads['1.0.0']).toBe(before + 1)
  }, 90_000)
})
