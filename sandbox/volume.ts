import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { cgroupName } from './cgroup'
import { diskUsage } from './disk'
import type { SandboxSpec } from './driver'
import { bindMount, unmountNow } from './mount'
import { refillSpares, settleSpares } from './spare-refill'
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

/** The folders of a sandbox's disk and their modes: workspace and home are bound onto the host paths; tmp holds each exec's /tmp. */
const FOLDERS = [
  ['workspace', 0o755],
  ['home', 0o755],
  ['tmp', 0o1777],
] as const

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
      const spares = SpareImages.beside(stateDir, this.sizeBytes)
      if (!(fresh && (await spares.take(this.image, this.mountDir)))) {
        if (fresh) await formatImage(this.image, this.sizeBytes)
        await mountImage(this.image, this.mountDir)
      }
      if (fresh) {
        spares.refill()
        await this.adopt(mounted)
      }
    }
    for (const [name, mode] of FOLDERS) {
      const target = name === 'workspace' ? hostWorkspace : name === 'home' ? hostHome : null
      const inside = join(this.mountDir, name)
      // A link the sandbox planted in place of one of these folders is never followed: replaced.
      if (existsSync(inside) && !lstatSync(inside).isDirectory()) rmSync(inside, { force: true })
      if (!existsSync(inside)) {
        mkdirSync(inside)
        chmodSync(inside, mode)
      }
      if (target && !mounted.has(target)) bindMount(inside, target)
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

  /** Unmounts everything and deletes the image; the sandbox's processes must be gone. */
  async remove(): Promise<void> {
    const mounted = mountPoints()
    for (const path of [this.spec.hostWorkspace, this.spec.hostHome, this.mountDir]) {
      if (mounted.has(path)) unmount(path)
    }
    rmSync(this.image, { force: true })
    rmSync(`${this.image}.new`, { force: true }) // a format a crash cut short
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

/**
 * Writes a sparse ext4 image of `sizeBytes` at `path` (0600): only the metadata's blocks are
 * written. Built under another name and renamed, so `path` is only ever a whole image.
 */
async function formatImage(path: string, sizeBytes: number, background = false): Promise<void> {
  const building = `${path}.new`
  rmSync(building, { force: true })
  writeFileSync(building, '', { mode: 0o600 })
  truncateSync(building, Math.max(MIN_BYTES, sizeBytes)) // sparse: no block is allocated
  // -m 0: nothing reserved for root (everything in it is the sandbox's); lazy init and nodiscard
  // keep the format at a few ms whatever the size, writing only the metadata's blocks. No resize
  // inode: it reserves (and writes) 4 MB of descriptor blocks for growing the file system online,
  // which an image of a fixed size never does, and it was half of the format's time (16 ms -> 7 ms).
  await must(
    lowly(['mkfs.ext4', '-q', '-F', '-m', '0', '-O', '^resize_inode', '-E', 'nodiscard,lazy_itable_init=1,lazy_journal_init=1', building], background),
    'format the sandbox disk',
  )
  renameSync(building, path)
}

/** Loop-mounts an image. nosuid, nodev: a set-uid binary or a device node the sandbox made there means nothing on the host. */
function mountImage(image: string, dir: string, background = false): Promise<void> {
  return must(lowly(['mount', '-o', 'loop,nosuid,nodev', image, dir], background), 'mount the sandbox disk')
}

/**
 * A spare disk is made in the background (see spare-refill.ts), at the lowest CPU
 * priority: it never slows a start or a running sandbox (sandboxes themselves run at nice 10).
 */
function lowly(argv: string[], background: boolean): string[] {
  return background ? ['nice', '-n', '19', ...argv] : argv
}

/**
 * Formatted, empty images kept ready and already loop-mounted, so that creating a sandbox costs a
 * rename and a bind (microseconds), not a `mkfs.ext4` and a `mount -o loop` (tens of ms, most of
 * a bwrap sandbox's start). They sit in `.spare-disks` beside the sandboxes' folders (the same file
 * system, so the rename works), one pool per image size: `<size>-<uuid>.img`, mounted on
 * `<size>-<uuid>.mnt`; an image is renamed to `.img` only once it is mounted, so a spare is ready
 * when both are there. They hold no data (a sparse image's metadata only), and outlive agentd:
 * the next start takes them as they are, and clears those a reboot unmounted.
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

  private building = false
  private readonly waiters: (() => void)[] = []

  private constructor(
    readonly dir: string,
    readonly sizeBytes: number,
  ) {}

  private names(): string[] {
    try {
      return readdirSync(this.dir).filter((name) => name.startsWith(`${this.sizeBytes}-`))
    } catch {
      return []
    }
  }

  private mountOf(image: string): string {
    return join(this.dir, image.replace(/\.img$/, '.mnt'))
  }

  /** Spare images ready to take: renamed to `.img`, and mounted. */
  private ready(): string[] {
    const mounted = mountPoints()
    return this.names().filter((name) => name.endsWith('.img') && mounted.has(this.mountOf(name)))
  }

  /**
   * Moves a ready spare to `image` and binds its file system onto `mountDir`; false when there is
   * none (after waiting for the one being made, if any: it is further along than a new one), or
   * when the bind failed (the spare is gone then). The spare's own mount goes at once: left for
   * later, the image would stay mounted there after the sandbox's own mounts went, and mounting it
   * again (ensure) would put two file systems on one image.
   */
  async take(image: string, mountDir: string): Promise<boolean> {
    if (this.building && this.ready().length === 0) await new Promise<void>((resolve) => this.waiters.push(resolve))
    for (const name of this.ready()) {
      const spareMount = this.mountOf(name)
      try {
        renameSync(join(this.dir, name), image)
      } catch {
        continue // taken meanwhile: try the next
      }
      let bound = true
      try {
        bindMount(spareMount, mountDir)
      } catch {
        bound = false
      }
      unmount(spareMount)
      rmSync(spareMount, { recursive: true, force: true })
      if (bound) return true
      rmSync(image, { force: true })
      return false
    }
    return false
  }

  /** Formats and mounts spares in the background until KEEP are ready (see spare-refill.ts); failures only mean no spare. */
  refill(): void {
    const run = async () => {
      this.building = true
      try {
        await this.build()
      } finally {
        this.building = false
        this.wake()
      }
    }
    refillSpares(`spare disks ${this.dir} ${this.sizeBytes}`, run, this.ready().length === 0)
  }

  /** Lets the creates waiting for a spare look again. */
  private wake(): void {
    for (const resolve of this.waiters.splice(0)) resolve()
  }

  private async build(): Promise<void> {
    try {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 })
      this.clearStale()
      while (this.ready().length < SpareImages.KEEP) {
        const base = join(this.dir, `${this.sizeBytes}-${crypto.randomUUID()}`)
        await formatImage(`${base}.img.new`, this.sizeBytes, true)
        mkdirSync(`${base}.mnt`)
        await mountImage(`${base}.img.new`, `${base}.mnt`, true)
        for (const [name, mode] of FOLDERS) {
          mkdirSync(join(`${base}.mnt`, name))
          chmodSync(join(`${base}.mnt`, name), mode) // the umask would narrow mkdir's mode
        }
        renameSync(`${base}.img.new`, `${base}.img`)
        this.wake()
      }
    } catch {
      // the next create formats and mounts its own image, and says so if that fails too
    }
  }

  /** Removes what is not a ready spare: half-built ones (a crash), and those a reboot unmounted. Only while nothing builds. */
  private clearStale(): void {
    const ready = new Set(this.ready())
    const mounted = mountPoints()
    for (const name of this.names()) {
      if (ready.has(name) || (name.endsWith('.mnt') && ready.has(name.replace(/\.mnt$/, '.img')))) continue
      const path = join(this.dir, name)
      if (mounted.has(path)) unmount(path)
      rmSync(path, { recursive: true, force: true })
    }
  }
}

/** Makes the spare disks asked for now and waits for those being made (before removing a DATA_DIR). */
export async function settleSpareDisks(): Promise<void> {
  await settleSpares()
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
function unmount(path: string): void {
  try {
    unmountNow(path)
  } catch {
    unmountNow(path, true)
  }
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
  for (const point of below) {
    try {
      unmountNow(point, true)
    } catch {
      // gone already (a parent's detach took it)
    }
  }
}
