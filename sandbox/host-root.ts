import { cpSync, existsSync, lstatSync, mkdirSync, readlinkSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

/**
 * The host's system as every sandbox sees it, read-only (bwrap and gVisor alike): a curated /etc,
 * copied once per driver, and the top of the host's root (merged-/usr links, or plain folders).
 */

/**
 * The /etc entries a sandbox sees (when the host has them): user and group names, host names,
 * the dynamic linker's cache, time zone, `alternatives` links, public CA certificates, shell
 * defaults. Not /etc as a whole: it holds host secrets (shadow, private keys, service configs).
 * They are copied once into a folder of the driver, bound as the sandbox's /etc (one mount).
 */
export const SANDBOX_ETC = [
  'passwd',
  'group',
  'hosts',
  'nsswitch.conf',
  'host.conf',
  'ld.so.cache',
  'ld.so.conf',
  'ld.so.conf.d',
  'localtime',
  'timezone',
  'alternatives',
  'ssl/certs',
  'ca-certificates',
  'ca-certificates.conf',
  'os-release',
  'debian_version',
  'profile',
  'bash.bashrc',
  'inputrc',
  'mime.types',
  'magic',
]

/**
 * Copies the SANDBOX_ETC entries the host has into `dir` (symlinks kept as they are), once: an
 * existing `dir` is kept, since running sandboxes have it bound. Built aside and renamed into
 * place, so a sandbox never sees half of it.
 */
export function buildSandboxEtc(dir: string): void {
  if (existsSync(dir)) return
  const building = `${dir}.${process.pid}-${Date.now()}`
  mkdirSync(building, { recursive: true })
  for (const entry of SANDBOX_ETC) {
    const source = `/etc/${entry}`
    if (!existsSync(source)) continue
    mkdirSync(join(building, entry, '..'), { recursive: true })
    cpSync(source, join(building, entry), { recursive: true, verbatimSymlinks: true })
  }
  // The sandbox has a hostname of its own.
  writeFileSync(join(building, 'hostname'), 'sandbox\n')
  try {
    renameSync(building, dir)
  } catch {
    rmSync(building, { recursive: true, force: true }) // another agentd process made it first
  }
}

/**
 * Host programs a sandbox sees as empty files it cannot run. `lsb_release` is a shell script that
 * forks a dozen processes; Codex runs it three times as it starts (its OS detection, which reads
 * /etc/os-release when there is none): 0.3 s of every Codex start on gVisor, where each process
 * costs more (docs/decisions.md). The sandbox's /etc/os-release says the same.
 */
const MASKED_PROGRAMS = ['/usr/bin/lsb_release']

/** What a sandbox masks: the MASKED_PROGRAMS this host has, each bound over by `file` (empty, read-only). */
export interface MaskedPrograms {
  file: string
  paths: string[]
}

/**
 * Of `paths` (a sandbox's record), those agentd masks: a record is agentd's own file, but nothing
 * read back from disk names a mount destination unchecked.
 */
export function knownMasks(paths: unknown): string[] {
  return Array.isArray(paths) ? MASKED_PROGRAMS.filter((path) => paths.includes(path)) : []
}

/** The masks of sandboxes under `runDir`, its empty file made once. */
export function maskedPrograms(runDir: string): MaskedPrograms {
  const file = join(runDir, 'masked-program')
  if (!existsSync(file)) {
    mkdirSync(runDir, { recursive: true })
    writeFileSync(file, '', { mode: 0o444 })
  }
  return { file, paths: MASKED_PROGRAMS.filter((path) => existsSync(path)) }
}

/** How the top of the host's root looks: `bin`, `lib`… are symlinks into /usr on merged-/usr systems. */
export interface HostRoot {
  links: { path: string; target: string }[]
  dirs: string[]
}

export function detectHostRoot(): HostRoot {
  const root: HostRoot = { links: [], dirs: [] }
  for (const name of ['bin', 'sbin', 'lib', 'lib32', 'lib64', 'libx32']) {
    const path = `/${name}`
    if (!existsSync(path)) continue
    if (lstatSync(path).isSymbolicLink()) root.links.push({ path, target: readlinkSync(path) })
    else root.dirs.push(path)
  }
  return root
}
