import { closeSync, constants, openSync } from 'node:fs'
import { cPath, errno, failure, libc } from './libc'

/**
 * Loop-mounting an image file as mount(8)'s `-o loop` does, but through the system calls (a free
 * loop device from /dev/loop-control, LOOP_CONFIGURE, mount(2)): about 1 ms where running
 * mount(8) took 4 ms, a process start, on every spare disk made during a burst of starts.
 */

const LOOP_CTL_GET_FREE = 0x4c82
const LOOP_CONFIGURE = 0x4c0a
/** The loop device lets go of the image when its last user (the mount) goes: umount alone frees it. */
const LO_FLAGS_AUTOCLEAR = 4
const MS_NOSUID = 0x2
const MS_NODEV = 0x4
const EBUSY = 16

/**
 * ext4's own options for a sandbox image. noinit_itable: mkfs left the inode tables to be zeroed
 * lazily, and after each mount a kernel thread would write zeros over all of them (80 groups for
 * 10 GB), taking CPU from the starts of a burst; the image is sparse, so they read as zeros already.
 */
export const IMAGE_MOUNT_OPTIONS = 'noinit_itable'

// struct loop_config { u32 fd; u32 block_size; struct loop_info64 info; u64 reserved[8] }, where
// loop_info64's lo_flags sits 52 bytes in and lo_file_name (64 bytes) 56 bytes in.
const CONFIG_BYTES = 304
const FLAGS_AT = 8 + 52
const NAME_AT = 8 + 56

/**
 * Attaches `image` to a free loop device and mounts it (ext4, nosuid, nodev, noinit_itable) on
 * `dir`. Throws when the system has no loop control device or the mount fails; the caller then
 * falls back to mount(8), which says why in its own words.
 */
export function loopMount(image: string, dir: string): void {
  const options = cPath(IMAGE_MOUNT_OPTIONS)
  const backing = openSync(image, constants.O_RDWR | constants.O_NOFOLLOW)
  try {
    const control = openSync('/dev/loop-control', constants.O_RDWR)
    try {
      // Another process may take the free device between the two calls: ask again.
      for (let attempt = 0; ; attempt++) {
        const index = libc.ioctl(control, LOOP_CTL_GET_FREE, null)
        if (index < 0) throw failure('no free loop device')
        const device = `/dev/loop${index}`
        const loop = openSync(device, constants.O_RDWR)
        try {
          const config = Buffer.alloc(CONFIG_BYTES)
          config.writeUInt32LE(backing, 0)
          config.writeUInt32LE(LO_FLAGS_AUTOCLEAR, FLAGS_AT)
          config.write(image.slice(-63), NAME_AT) // what losetup -l shows
          if (libc.ioctl(loop, LOOP_CONFIGURE, config) !== 0) {
            const code = errno()
            if (code === EBUSY && attempt < 20) continue
            throw failure(`could not attach ${image} to ${device}`, code)
          }
          // Mounted before our descriptor closes: with autoclear, the last close would detach it.
          if (libc.mount(cPath(device), cPath(dir), cPath('ext4'), MS_NOSUID | MS_NODEV, options) !== 0)
            throw failure(`could not mount ${image} on ${dir}`)
          return
        } finally {
          closeSync(loop) // an attached device that did not mount is detached by this close
        }
      }
    } finally {
      closeSync(control)
    }
  } finally {
    closeSync(backing) // the loop device holds the file itself
  }
}
