import { mkdirSync, readdirSync, renameSync, rmSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { formatImage, mountImage, mountPoints, unmount } from './disk-image'
import { bindMount } from './mount'
import { refillSpares } from './spare-refill'

/**
 * Formatted, empty images kept ready and already loop-mounted, so that creating a sandbox costs a
 * rename and a bind (microseconds), not a `mkfs.ext4` and a `mount -o loop` (tens of ms, most of
 * a bwrap sandbox's start). They sit in `.spare-disks` beside the sandboxes' folders (the same file
 * system, so the rename works), one pool per image size: `<size>-<uuid>.img`, mounted on
 * `<size>-<uuid>.mnt`; an image is renamed to `.img` only once it is mounted, so a spare is ready
 * when both are there. They hold no data (a sparse image's metadata only), and outlive agentd:
 * the next start takes them as they are, and clears those a reboot unmounted.
 */
export class SpareImages {
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
        // With none ready, the next start waits for this one: no reason to make it last in line.
        const lowly = this.ready().length > 0
        await formatImage(`${base}.img.new`, this.sizeBytes, lowly)
        mkdirSync(`${base}.mnt`)
        await mountImage(`${base}.img.new`, `${base}.mnt`, lowly)
        renameSync(`${base}.img.new`, `${base}.img`)
        this.wake()
        // Each spare is a few system calls on this thread: the next waits for a turn of the event
        // loop, so the starts of a burst (their processes' output and exits) go between them.
        await new Promise((resolve) => setImmediate(resolve))
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
