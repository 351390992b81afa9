import { chmodSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Blocks, syncFile, writeBlocks, writtenBlocks } from './sparse-file'
import { IMAGE_MOUNT_OPTIONS, loopMount } from './loop'
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
 * Writes a sparse ext4 image of `sizeBytes` at `path` (0600) holding the empty FOLDERS: only the
 * metadata's blocks are written. Built under another name and renamed, so `path` is only ever a
 * whole image. The first image of a size is made by mkfs.ext4 and kept in memory as its written
 * blocks (about 240 KB for 10 GB); every later one of that size is those blocks written into a new
 * sparse file, with no process to start (0.2 ms where mkfs took 3-4). The images of one agentd
 * then share a UUID, which ext4 allows. The file is synced, as mkfs syncs its images, on the I/O
 * threads: mounting would sync it anyway (ext4 writes its superblock with FUA, which the loop device
 * turns into an fsync of the whole image file), but there on agentd's own thread (1.4 ms, not 0.9).
 */
export async function formatImage(path: string, sizeBytes: number, background = false): Promise<void> {
  const building = `${path}.new`
  const size = Math.max(MIN_BYTES, sizeBytes)
  rmSync(building, { force: true })
  const made = templates.get(size)
  if (made) {
    writeBlocks(building, size, made)
    await syncFile(building)
  } else {
    writeFileSync(building, '', { mode: 0o600 })
    truncateSync(building, size) // sparse: no block is allocated
    const skeleton = mkdtempSync(join(tmpdir(), 'agentd-skeleton-'))
    try {
      for (const [name, mode] of FOLDERS) {
        mkdirSync(join(skeleton, name))
        chmodSync(join(skeleton, name), mode) // the umask would narrow mkdir's mode
      }
      // -m 0: nothing reserved for root (everything in it is the sandbox's); lazy init and nodiscard
      // keep the format at a few ms whatever the size, writing only the metadata's blocks (mounted
      // with noinit_itable, see loop.ts). No resize inode: it reserves (and writes) 4 MB of
      // descriptor blocks for growing the file system online, which an image of a fixed size never
      // does, and it was half of the format's time. -d: the folders, made in the image by mkfs.
      await must(
        lowly(
          [
            'mkfs.ext4',
            '-q',
            '-F',
            '-m',
            '0',
            '-O',
            '^resize_inode',
            '-E',
            'nodiscard,lazy_itable_init=1,lazy_journal_init=1',
            '-d',
            skeleton,
            building,
          ],
          background,
        ),
        'format the sandbox disk',
      )
    } finally {
      rmSync(skeleton, { recursive: true, force: true })
    }
    templates.set(size, writtenBlocks(building))
  }
  renameSync(building, path)
}

/** Empty formatted images by size, as their written blocks. */
const templates = new Map<number, Blocks>()

/**
 * Loop-mounts an image. nosuid, nodev: a set-uid binary or a device node the sandbox made there
 * means nothing on the host. Through the system calls (loop.ts) where the host allows, else
 * mount(8), with the type named: left to probe, mount(8) reads the image with libblkid first,
 * which was half of its time (10 ms -> 5 ms).
 */
export async function mountImage(image: string, dir: string, background = false): Promise<void> {
  try {
    loopMount(image, dir)
  } catch {
    await must(
      lowly(['mount', '-t', 'ext4', '-o', `loop,nosuid,nodev,${IMAGE_MOUNT_OPTIONS}`, image, dir], background),
      'mount the sandbox disk',
    )
  }
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
  if (result.code !== 0)
    throw new Error(`could not ${what}: ${(result.stderr || result.stdout).trim().split('\n')[0] || `${argv[0]} exited ${result.code}`}`)
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
