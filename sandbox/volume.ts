import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { cgroupName } from './cgroup'
import { diskUsage } from './disk'
import type { SandboxSpec } from './driver'
import { runHelper } from './spawn'

/**
 * A sandbox's disk: a sparse ext4 image of the disk limit's size, loop-mounted on the host. The
 * sandbox's workspace, home and temp folder are folders in it, bound onto the host paths the rest
 * of agentd knows (`hostWorkspace`, `hostHome`), so whatever the sandbox writes lands in the image
 * and a write past its size fails inside with ENOSPC; the host's disk holds only the blocks
 * written. The image lives in the driver's state folder (never visible inside); it survives park
 * and a restart of agentd (`ensure` mounts again what is not mounted) and goes with `remove`.
 */

/** Smallest image: ext4's own metadata needs a few MB before any file fits. */
const MIN_BYTES = 16 * 1024 * 1024

/** Where a sandbox's disk image is mounted: everything the sandbox can write lives below it. */
export function volumeMountDir(stateDir: string): string {
  return join(stateDir, 'disk')
}

export class SandboxVolume {
  /** The image file. */
  readonly image: string
  /** Where the image is mounted on the host (inside the state folder). */
  readonly mountDir: string

  constructor(
    readonly spec: Pick<SandboxSpec, 'id' | 'hostWorkspace' | 'hostHome' | 'stateDir'>,
    readonly sizeBytes: number,
  ) {
    this.image = join(spec.stateDir, 'disk.img')
    this.mountDir = volumeMountDir(spec.stateDir)
  }

  /** The image's temp folder: one fresh folder in it per exec is that exec's /tmp (bwrap). */
  get tmp(): string {
    return join(this.mountDir, 'tmp')
  }

  /**
   * A new, empty folder for one exec's /tmp. Fresh per exec, as a tmpfs per exec was: the folder
   * bwrap creates mount points in is then one agentd just made, never one a previous exec could
   * have filled with links.
   */
  execTmp(name: string): string {
    const dir = join(this.tmp, name)
    mkdirSync(dir)
    chmodSync(dir, 0o1777)
    return dir
  }

  /** Removes one exec's /tmp once it ended (its whole pid namespace is gone with it). */
  dropExecTmp(dir: string): void {
    rmSync(dir, { recursive: true, force: true })
  }

  /** Removes every exec's /tmp: at create and recover, when no exec runs. */
  clearTmp(): void {
    for (const name of existsSync(this.tmp) ? readdirSync(this.tmp) : []) rmSync(join(this.tmp, name), { recursive: true, force: true })
  }

  /**
   * Makes the image (first time only: an existing one keeps its files), mounts it and binds its
   * workspace and home onto the host paths, each step only if not done already. Idempotent, so a
   * wake or a recover after a restart repairs whatever is missing.
   */
  async ensure(): Promise<void> {
    const { hostWorkspace, hostHome, stateDir } = this.spec
    for (const dir of [hostWorkspace, hostHome, stateDir, this.mountDir]) mkdirSync(dir, { recursive: true })
    const mounted = mountPoints()
    if (!mounted.has(this.mountDir)) {
      const fresh = !existsSync(this.image)
      if (fresh) await this.format()
      // nosuid, nodev: a set-uid binary or a device node the sandbox made there means nothing on the host.
      await must(['mount', '-o', 'loop,nosuid,nodev', this.image, this.mountDir], 'mount the sandbox disk')
      if (fresh) await this.adopt(mounted)
    }
    for (const [name, target, mode] of [
      ['workspace', hostWorkspace, 0o755],
      ['home', hostHome, 0o755],
      ['tmp', null, 0o1777],
    ] as const) {
      const inside = join(this.mountDir, name)
      // A link the sandbox planted in place of one of these folders is never followed: replaced.
      if (existsSync(inside) && !lstatSync(inside).isDirectory()) rmSync(inside, { force: true })
      if (!existsSync(inside)) {
        mkdirSync(inside)
        chmodSync(inside, mode)
      }
      if (target && !mounted.has(target)) await must(['mount', '--bind', inside, target], `bind the sandbox ${name}`)
    }
  }

  /**
   * A sandbox made before sandboxes had disk images has its files straight in the host folders:
   * they move into the new image (copied as they are: links stay links, nothing is followed), or,
   * when they do not fit, the image goes and the files stay where they were.
   */
  private async adopt(mounted: Set<string>): Promise<void> {
    for (const [name, host] of [
      ['workspace', this.spec.hostWorkspace],
      ['home', this.spec.hostHome],
    ] as const) {
      if (mounted.has(host) || readdirSync(host).length === 0) continue
      const inside = join(this.mountDir, name)
      mkdirSync(inside, { recursive: true })
      const copied = await runHelper(['cp', '-a', '--', `${host}/.`, `${inside}/`], 600_000)
      if (copied.code !== 0) {
        await this.remove()
        const why = copied.stderr.trim().split('\n')[0] ?? `cp exited ${copied.code}`
        throw new Error(`the sandbox's files do not fit its disk limit of ${Math.round(this.sizeBytes / 1024 / 1024)} MB (${why}); raise AGENTD_SANDBOX_DISK_MB`)
      }
      for (const entry of readdirSync(host)) rmSync(join(host, entry), { recursive: true, force: true })
    }
  }

  /**
   * A sparse file of the limit's size with an ext4 in it: a spare formatted ahead of time when one
   * is ready (a rename), else formatted now; either way the next spare is formatted in the background.
   */
  private async format(): Promise<void> {
    const spares = SpareImages.beside(this.spec.stateDir, this.sizeBytes)
    if (!spares.take(this.image)) {
      const building = `${this.image}.new`
      await formatImage(building, this.sizeBytes)
      renameSync(building, this.image)
    }
    spares.refill()
  }

  /** Unmounts everything and deletes the image; the sandbox's processes must be gone. */
  async remove(): Promise<void> {
    const mounted = mountPoints()
    for (const path of [this.spec.hostWorkspace, this.spec.hostHome, this.mountDir]) {
      if (mounted.has(path)) await unmount(path)
    }
    rmSync(this.image, { force: true })
    rmSync(`${this.image}.new`, { force: true })
  }

  /** Bytes the sandbox's files hold on the host's disk: the image's allocated blocks. */
  usage(): number {
    try {
      return lstatSync(this.image).blocks * 512
    } catch {
      return 0
    }
  }
}

/** Writes a sparse ext4 image of `sizeBytes` at `path` (0600): only the metadata's blocks are written. */
async function formatImage(path: string, sizeBytes: number): Promise<void> {
  rmSync(path, { force: true })
  writeFileSync(path, '', { mode: 0o600 })
  truncateSync(path, Math.max(MIN_BYTES, sizeBytes)) // sparse: no block is allocated
  // -m 0: nothing reserved for root (everything in it is the sandbox's); lazy init and nodiscard
  // keep the format at a few ms whatever the size, writing only the metadata's blocks.
  await must(['mkfs.ext4', '-q', '-F', '-m', '0', '-E', 'nodiscard,lazy_itable_init=1,lazy_journal_init=1', path], 'format the sandbox disk')
}

/**
 * Formatted, empty images kept ready so that creating a sandbox costs a rename and a mount, not a
 * `mkfs.ext4` (tens of ms, most of a bwrap sandbox's start). They sit in `.spare-disks` beside the
 * sandboxes' folders (the same file system, so the rename works), one pool per image size, and
 * hold no data: a sparse image's metadata only.
 */
class SpareImages {
  private static readonly pools = new Map<string, SpareImages>()
  /** Spares kept per size: enough for a small burst of creates. */
  static readonly KEEP = 3

  /** The pool for sandboxes whose state folder is `stateDir` (`<root>/<id>/sandbox`). */
  static beside(stateDir: string, sizeBytes: number): SpareImages {
    const dir = join(dirname(dirname(stateDir)), '.spare-disks')
    const key = `${dir}\0${sizeBytes}`
    let pool = SpareImages.pools.get(key)
    if (!pool) SpareImages.pools.set(key, (pool = new SpareImages(dir, sizeBytes)))
    return pool
  }

  private building = 0

  private constructor(
    readonly dir: string,
    readonly sizeBytes: number,
  ) {}

  private ready(): string[] {
    try {
      return readdirSync(this.dir).filter((name) => name.startsWith(`${this.sizeBytes}-`) && name.endsWith('.img'))
    } catch {
      return []
    }
  }

  /** Moves a ready spare to `image`; false when there is none. */
  take(image: string): boolean {
    for (const name of this.ready()) {
      try {
        renameSync(join(this.dir, name), image)
        return true
      } catch {
        // taken meanwhile by another create: try the next
      }
    }
    return false
  }

  /** Formats spares in the background until KEEP are ready; failures only mean no spare. */
  refill(): void {
    if (this.building > 0 || this.ready().length >= SpareImages.KEEP) return
    this.building++
    void (async () => {
      try {
        mkdirSync(this.dir, { recursive: true, mode: 0o700 })
        while (this.ready().length < SpareImages.KEEP) {
          const name = `${this.sizeBytes}-${crypto.randomUUID()}.img`
          await formatImage(join(this.dir, `${name}.new`), this.sizeBytes)
          renameSync(join(this.dir, `${name}.new`), join(this.dir, name))
        }
      } catch {
        // the next create formats its own image, and says so if that fails too
      } finally {
        this.building--
      }
    })()
  }
}

/** Disk use of a volume-backed sandbox: its image plus the driver's other state (checkpoints, bundle). */
export function volumeDiskUsage(volume: SandboxVolume): number {
  const { stateDir } = volume.spec
  let others: string[] = []
  try {
    others = readdirSync(stateDir)
      .filter((name) => name !== 'disk' && name !== 'disk.img')
      .map((name) => join(stateDir, name))
  } catch {
    // no state folder yet
  }
  return volume.usage() + diskUsage(others)
}

/**
 * Volumes a driver has mounted, remembered under its run folder (one file per sandbox naming its
 * paths), so that `sweep` after a restart can unmount those of sandboxes that are no longer live.
 */
export class VolumeRegistry {
  constructor(readonly dir: string) {}

  add(volume: SandboxVolume): void {
    mkdirSync(this.dir, { recursive: true })
    writeFileSync(join(this.dir, cgroupName(volume.spec.id)), JSON.stringify({ ...volume.spec, sizeBytes: volume.sizeBytes }))
  }

  delete(id: string): void {
    rmSync(join(this.dir, cgroupName(id)), { force: true })
  }

  /** Unmounts and removes the volumes of sandboxes not in `keep` (cgroupName of their ids); their names. */
  async sweep(keep: Set<string>): Promise<string[]> {
    const removed: string[] = []
    for (const name of existsSync(this.dir) ? readdirSync(this.dir) : []) {
      if (keep.has(name)) continue
      try {
        const saved = JSON.parse(readFileSync(join(this.dir, name), 'utf8')) as SandboxVolume['spec'] & { sizeBytes: number }
        await new SandboxVolume(saved, saved.sizeBytes).remove()
      } catch {
        // an unreadable record: nothing of ours to unmount
      }
      rmSync(join(this.dir, name), { force: true })
      removed.push(name)
    }
    return removed
  }
}

/** Mount points of this mount namespace (from /proc/self/mountinfo, octal escapes decoded). */
export function mountPoints(): Set<string> {
  const points = new Set<string>()
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const field = line.split(' ')[4]
    if (field) points.add(field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8))))
  }
  return points
}

/** Unmounts `path`; a mount a dying process still holds is detached lazily (freed when released). */
async function unmount(path: string): Promise<void> {
  const plain = await runHelper(['umount', path], 30_000)
  if (plain.code === 0) return
  await must(['umount', '--lazy', path], `unmount ${path}`)
}

async function must(argv: string[], what: string): Promise<void> {
  const result = await runHelper(argv, 60_000)
  if (result.code !== 0) throw new Error(`could not ${what}: ${(result.stderr || result.stdout).trim().split('\n')[0] || `${argv[0]} exited ${result.code}`}`)
}

/**
 * Unmounts every mount below `dir` (deepest first, lazily): for removing a whole DATA_DIR whose
 * server is gone while its sandboxes' disks are still mounted (a test's, or an operator's).
 */
export function unmountUnder(dir: string): void {
  const prefix = `${dir.replace(/\/+$/, '')}/`
  const below = [...mountPoints()].filter((point) => point.startsWith(prefix)).sort((a, b) => b.length - a.length)
  for (const point of below) Bun.spawnSync(['umount', '--lazy', point], { stdout: 'ignore', stderr: 'ignore' })
}
