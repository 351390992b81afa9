import { readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { unmountNow } from './mount'
import { runHelper } from './spawn'

/** Sandbox disk images: formatting, loop-mounting and unmounting them (volume.ts uses one per sandbox, spare-disks.ts keeps some ready). */

/** Smallest image: ext4's own metadata needs a few MB before any file fits. */
export const MIN_BYTES = 16 * 1024 * 1024

/** The folders of a sandbox's disk and their modes: workspace and home are bound onto the host paths; tmp holds each exec's /tmp. */
export const FOLDERS = [
  ['workspace', 0o755],
  ['home', 0o755],
  ['tmp', 0o1777],
] as const

/**
 * Writes a sparse ext4 image of `sizeBytes` at `path` (0600): only the metadata's blocks are
 * written. Built under another name and renamed, so `path` is only ever a whole image.
 */
export async function formatImage(path: string, sizeBytes: number, background = false): Promise<void> {
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

/**
 * Loop-mounts an image. nosuid, nodev: a set-uid binary or a device node the sandbox made there
 * means nothing on the host. The type is named: left to probe, mount(8) reads the image with
 * libblkid first, which was half of the mount's time (10 ms -> 5 ms).
 */
export function mountImage(image: string, dir: string, background = false): Promise<void> {
  return must(lowly(['mount', '-t', 'ext4', '-o', 'loop,nosuid,nodev', image, dir], background), 'mount the sandbox disk')
}

/**
 * A spare disk is made in the background (see spare-refill.ts), at the lowest CPU priority while
 * the pool still has one: it never slows a start or a running sandbox (sandboxes themselves run at
 * nice 10). The one a start is waiting for is made at agentd's own priority.
 */
function lowly(argv: string[], background: boolean): string[] {
  return background ? ['nice', '-n', '19', ...argv] : argv
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
export function unmount(path: string): void {
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
