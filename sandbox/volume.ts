import { chmodSync, existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { cgroupName } from './cgroup'
import { diskUsage } from './disk'
import type { SandboxSpec } from './driver'
import { FOLDERS, formatImage, mountImage, mountPoints, unmount } from './disk-image'
import { bindMount } from './mount'
import { SpareImages } from './spare-disks'
import { runHelper } from './spawn'

/**
 * A sandbox's disk: a sparse ext4 image of the disk limit's size, loop-mounted on the host. The
 * sandbox's workspace, home and temp folder are folders in it, bound onto the host paths the rest
 * of agentd knows (`hostWorkspace`, `hostHome`), so whatever the sandbox writes lands in the image
 * and a write past its size fails inside with ENOSPC; the host's disk holds only the blocks
 * written. The image lives in the driver's state folder (never visible inside); it survives park
 * and a restart of agentd (`ensure` mounts again what is not mounted) and goes with `remove`.
 */

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
    readonly spec: Pick<SandboxSpec, 'id' | 'hostWorkspace' | 'hostHome' | 'stateDir' | 'baseImage'>,
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
    // A copy into a prebuilt image that a killed server never finished left the disk frozen.
    if (existsSync(this.frozenMarker) && mounted.has(this.mountDir)) await this.thaw()
    if (!mounted.has(this.mountDir)) {
      const fresh = !existsSync(this.image)
      const spares = SpareImages.beside(stateDir, this.sizeBytes)
      if (fresh && this.spec.baseImage) {
        // A prebuilt image: copied (its blocks shared where the file system can), never written.
        await copyImage(this.spec.baseImage, this.image)
        await mountImage(this.image, this.mountDir)
        this.clearBesideFolders()
      } else if (!(fresh && (await spares.take(this.image, this.mountDir)))) {
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
        throw new Error(
          `the sandbox's files do not fit its disk limit of ${Math.round(this.sizeBytes / 1024 / 1024)} MB ` +
            `(${why}); raise AGENTD_SANDBOX_DISK_MB`,
        )
      }
      for (const entry of readdirSync(host)) rmSync(join(host, entry), { recursive: true, force: true })
    }
  }

  /**
   * Only the workspace and home of a prebuilt image carry over: the temp folders and exec output of
   * the sandbox it was saved from go (nothing of that sandbox's processes belongs to this one).
   */
  private clearBesideFolders(): void {
    const keep = new Set(['workspace', 'home', 'lost+found'])
    for (const name of readdirSync(this.mountDir)) if (!keep.has(name)) rmSync(join(this.mountDir, name), { recursive: true, force: true })
  }

  /**
   * Copies the mounted image to `dest` as it is now (a prebuilt image): the file system is frozen
   * for the copy (fsfreeze flushes it first and holds every write), so the copy is a consistent
   * ext4 image, not one caught mid-write. The sandbox's processes should be idle: a write of
   * theirs waits until the copy is done.
   */
  async saveTo(dest: string): Promise<void> {
    if (!mountPoints().has(this.mountDir)) throw new Error('the sandbox disk is not mounted')
    // Written first: a server killed while the disk is frozen leaves it, and the next `ensure` thaws.
    writeFileSync(this.frozenMarker, '')
    try {
      // No time limit short of the copy's: a freeze flushes the disk first, and cannot be cut short.
      const frozen = await runHelper(['fsfreeze', '--freeze', this.mountDir], 600_000)
      if (frozen.code !== 0) throw new Error(`could not freeze the sandbox disk: ${frozen.stderr.trim().split('\n')[0] ?? ''}`)
      await copyImage(this.image, dest)
    } finally {
      // Also after a failed freeze (it may have taken effect); a disk not frozen answers EINVAL, which is fine.
      await this.thaw()
    }
  }

  private get frozenMarker(): string {
    return join(this.spec.stateDir, 'disk.frozen')
  }

  /** Thaws the disk a copy froze, and forgets that it did. */
  private async thaw(): Promise<void> {
    await runHelper(['fsfreeze', '--unfreeze', this.mountDir], 60_000)
    rmSync(this.frozenMarker, { force: true })
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
 * A copy of a sandbox disk image at `dest` (0600), made under another name and renamed: shares its
 * blocks with `source` where the file system can (a reflink, on XFS or btrfs), else copies only the
 * blocks written (a sparse copy: the holes of a 10 GB image with 200 MB in it cost nothing).
 */
export async function copyImage(source: string, dest: string): Promise<void> {
  const building = `${dest}.new`
  rmSync(building, { force: true })
  const copied = await runHelper(['cp', '--reflink=auto', '--sparse=always', '--', source, building], 600_000)
  if (copied.code !== 0) {
    rmSync(building, { force: true })
    throw new Error(`could not copy the disk image: ${copied.stderr.trim().split('\n')[0] ?? `cp exited ${copied.code}`}`)
  }
  chmodSync(building, 0o600)
  renameSync(building, dest)
}

/**
 * Copies a folder's content as it is into `to` (made if missing): links stay links and are never
 * followed, modes and times are kept, blocks shared where the file system can.
 */
export async function copyFolder(from: string, to: string): Promise<void> {
  mkdirSync(to, { recursive: true })
  const copied = await runHelper(['cp', '-a', '--reflink=auto', '--', `${from}/.`, `${to}/`], 600_000)
  if (copied.code !== 0) throw new Error(`could not copy ${from}: ${copied.stderr.trim().split('\n')[0] ?? `cp exited ${copied.code}`}`)
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
