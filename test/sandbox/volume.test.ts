import { expect, test } from 'bun:test'
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, statfsSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { formatImage, mountImage, mountPoints, unmountUnder } from '../../sandbox/disk-image'
import { loopMount } from '../../sandbox/loop'
import { settleSpares } from '../../sandbox/spare-refill'
import { SandboxVolume } from '../../sandbox/volume'
import { tempRoot } from './helpers'

/** The disk image under a sandbox's workspace and home, on the host (root: mount needs it). */

const MiB = 1024 * 1024

function volumeIn(root: string, id: string, sizeBytes: number): SandboxVolume {
  const dir = join(root, id)
  return new SandboxVolume(
    { id, hostWorkspace: join(dir, 'workspace'), hostHome: join(dir, 'home'), stateDir: join(dir, 'sandbox') },
    sizeBytes,
  )
}

test('ensure makes a sparse image, binds its workspace and home, is idempotent, mounts it again after a reboot; remove unmounts and deletes it', async () => {
  await using root = tempRoot('agentd-vol-')
  const volume = volumeIn(root.path, 's1', 64 * MiB)
  await volume.ensure()
  await volume.ensure()
  const mounted = mountPoints()
  for (const path of [volume.mountDir, volume.spec.hostWorkspace, volume.spec.hostHome]) expect(mounted.has(path)).toBe(true)
  // The host paths are the image's: their filesystem is the image's size, not the host disk's.
  const fs = statfsSync(volume.spec.hostWorkspace)
  expect(fs.blocks * fs.bsize).toBeLessThanOrEqual(64 * MiB)
  expect(lstatSync(volume.image).blocks * 512).toBeLessThan(8 * MiB) // sparse: metadata only
  writeFileSync(join(volume.spec.hostHome, 'kept'), 'across a remount')
  // A reboot (or an operator) unmounted everything: the next ensure mounts the same image again.
  unmountUnder(join(root.path, 's1'))
  expect(existsSync(join(volume.spec.hostHome, 'kept'))).toBe(false)
  await volume.ensure()
  expect(readFileSync(join(volume.spec.hostHome, 'kept'), 'utf8')).toBe('across a remount')
  await volume.remove()
  const after = mountPoints()
  for (const path of [volume.mountDir, volume.spec.hostWorkspace, volume.spec.hostHome]) expect(after.has(path)).toBe(false)
  expect(existsSync(volume.image)).toBe(false)
})

test('files a sandbox had before it had an image move into it as they are, links not followed', async () => {
  await using root = tempRoot('agentd-vol-')
  const volume = volumeIn(root.path, 's2', 64 * MiB)
  mkdirSync(join(volume.spec.hostWorkspace, 'src'), { recursive: true })
  writeFileSync(join(volume.spec.hostWorkspace, 'src', 'a.txt'), 'old work')
  mkdirSync(volume.spec.hostHome, { recursive: true })
  symlinkSync('/etc/passwd', join(volume.spec.hostHome, 'link'))
  await volume.ensure()
  expect(mountPoints().has(volume.spec.hostWorkspace)).toBe(true)
  expect(readFileSync(join(volume.spec.hostWorkspace, 'src', 'a.txt'), 'utf8')).toBe('old work')
  expect(readlinkSync(join(volume.spec.hostHome, 'link'))).toBe('/etc/passwd')
  expect(lstatSync(join(volume.mountDir, 'home', 'link')).isSymbolicLink()).toBe(true) // a link in the image too
  expect(existsSync(join(root.path, 's2', 'sandbox', 'disk', 'home', 'src'))).toBe(false)
  await volume.remove()
})

test('files that do not fit the limit stay where they were, and ensure says why', async () => {
  await using root = tempRoot('agentd-vol-')
  const volume = volumeIn(root.path, 's3', 16 * MiB)
  mkdirSync(volume.spec.hostWorkspace, { recursive: true })
  writeFileSync(join(volume.spec.hostWorkspace, 'big'), Buffer.alloc(40 * MiB, 1))
  await expect(volume.ensure()).rejects.toThrow('do not fit its disk limit of 16 MB')
  expect(mountPoints().has(volume.mountDir)).toBe(false)
  expect(lstatSync(join(volume.spec.hostWorkspace, 'big')).size).toBe(40 * MiB)
  expect(existsSync(volume.image)).toBe(false)
})

test('spare disks: a create takes one already formatted and mounted (its own mount gone after), the pool refills, and leftovers a reboot unmounted are cleared', async () => {
  await using root = tempRoot('agentd-vol-')
  const spareDir = join(root.path, '.spare-disks')
  const spares = () => (existsSync(spareDir) ? readdirSync(spareDir).sort() : [])
  // Leftovers of an earlier boot: an image no longer mounted, a half-built one, an empty mount folder.
  mkdirSync(spareDir, { recursive: true })
  // Spares are named by their size in bytes.
  const stale = [`${64 * MiB}-old.img`, `${64 * MiB}-half.img.new`, `${64 * MiB}-old.mnt`]
  for (const name of stale) {
    if (name.endsWith('.mnt')) mkdirSync(join(spareDir, name))
    else writeFileSync(join(spareDir, name), '')
  }

  const first = volumeIn(root.path, 's1', 64 * MiB)
  await first.ensure() // no spare ready: formats its own, then the pool fills
  await settleSpares()
  const ready = spares().filter((name) => name.endsWith('.img'))
  expect(ready).toHaveLength(3)
  for (const name of stale) expect(spares()).not.toContain(name)
  const mounted = mountPoints()
  for (const name of ready) expect(mounted.has(join(spareDir, name.replace(/\.img$/, '.mnt')))).toBe(true)

  const second = volumeIn(root.path, 's2', 64 * MiB)
  await second.ensure()
  // One spare went to s2: its image is s2's, its file system is on s2's mount, its own mount is gone.
  const taken = ready.filter((name) => !spares().includes(name))
  expect(taken).toHaveLength(1)
  const after = mountPoints()
  expect(after.has(join(spareDir, taken[0]!.replace(/\.img$/, '.mnt')))).toBe(false)
  for (const path of [second.mountDir, second.spec.hostWorkspace, second.spec.hostHome]) expect(after.has(path)).toBe(true)
  const fs = statfsSync(second.spec.hostWorkspace)
  expect(fs.blocks * fs.bsize).toBeLessThanOrEqual(64 * MiB)
  // What s2 writes is in s2's image (mounted again from the image file alone, it is still there).
  writeFileSync(join(second.spec.hostWorkspace, 'mine'), 's2')
  unmountUnder(join(root.path, 's2'))
  await second.ensure()
  expect(readFileSync(join(second.spec.hostWorkspace, 'mine'), 'utf8')).toBe('s2')
  await settleSpares()
  expect(spares().filter((name) => name.endsWith('.img'))).toHaveLength(3)
  await first.remove()
  await second.remove()
  expect(existsSync(second.image)).toBe(false)
})

test('images after the first of a size are its written blocks in a new sparse file: a sound file system, mounted without mount(8), and its loop device freed at unmount', async () => {
  await using root = tempRoot('agentd-vol-')
  const first = join(root.path, 'first.img')
  const second = join(root.path, 'second.img')
  await formatImage(first, 48 * MiB) // a size no other test uses: this one runs mkfs
  await formatImage(second, 48 * MiB) // written from the first one's blocks
  expect(lstatSync(second).size).toBe(48 * MiB)
  expect(lstatSync(second).mode & 0o777).toBe(0o600)
  // The same bytes (mkfs's zeroed stretches read as the holes they became), no more blocks.
  expect(Bun.spawnSync(['cmp', first, second]).exitCode).toBe(0)
  expect(lstatSync(second).blocks).toBeLessThanOrEqual(lstatSync(first).blocks)
  const fsck = Bun.spawnSync(['e2fsck', '-fn', second], { stdout: 'pipe', stderr: 'pipe' })
  expect(fsck.exitCode).toBe(0)

  const dir = join(root.path, 'mnt')
  mkdirSync(dir)
  loopMount(second, dir) // the system calls themselves: throws rather than fall back
  const attached = () => Bun.spawnSync(['losetup', '-j', second], { stdout: 'pipe' }).stdout.toString().trim()
  expect(attached()).toContain(second)
  const fs = statfsSync(dir)
  expect(fs.blocks * fs.bsize).toBeLessThanOrEqual(48 * MiB)
  writeFileSync(join(dir, 'kept'), 'written')
  // nosuid and nodev, as mount(8) -o loop,nosuid,nodev made them.
  const options = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .find((line) => line.split(' ')[4] === dir)!
    .split(' ')[5]!
  expect(options.split(',')).toEqual(expect.arrayContaining(['nosuid', 'nodev']))
  unmountUnder(root.path)
  expect(attached()).toBe('') // autoclear: the unmount let go of the loop device
  loopMount(second, dir)
  expect(readFileSync(join(dir, 'kept'), 'utf8')).toBe('written')
  unmountUnder(root.path)

  // Not an image: the direct mount throws, and mountImage's fallback says what mount(8) said.
  const junk = join(root.path, 'junk.img')
  writeFileSync(junk, Buffer.alloc(MiB))
  expect(() => loopMount(junk, dir)).toThrow(/could not mount/)
  await expect(mountImage(junk, dir)).rejects.toThrow(/could not mount the sandbox disk/)
  expect(attached()).toBe('')
  expect(mountPoints().has(dir)).toBe(false)
})
