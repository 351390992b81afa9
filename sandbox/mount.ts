import { dlopen, FFIType, read } from 'bun:ffi'

/**
 * Bind mounts and unmounts as the system calls themselves (mount(2), umount2(2) through libc):
 * a few microseconds each, where running mount(8) or umount(8) costs a process start, several
 * ms, on every sandbox create and remove. Loop mounts stay with mount(8), which finds and sets up
 * the loop device; they happen ahead of time (see the spare images in volume.ts).
 */

const MS_BIND = 0x1000
const MNT_DETACH = 0x2

const libc = dlopen('libc.so.6', {
  mount: { args: [FFIType.cstring, FFIType.cstring, FFIType.cstring, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
  umount2: { args: [FFIType.cstring, FFIType.i32], returns: FFIType.i32 },
  strerror: { args: [FFIType.i32], returns: FFIType.cstring },
  __errno_location: { args: [], returns: FFIType.ptr },
})

/** A NUL-terminated copy of a path, for a `char *` argument. */
const cPath = (path: string) => Buffer.from(`${path}\0`)

/** The error of the call that just failed, read before anything else can set errno on this thread. */
function failure(what: string): Error {
  const errno = read.i32(libc.symbols.__errno_location()!, 0)
  return Object.assign(new Error(`${what}: ${String(libc.symbols.strerror(errno))}`), { errno })
}

/**
 * `mount --bind source target`. A bind ignores other flags; it copies those of the mount the source
 * is on (a sandbox disk's nosuid and nodev).
 */
export function bindMount(source: string, target: string): void {
  if (libc.symbols.mount(cPath(source), cPath(target), null, MS_BIND, null) !== 0) throw failure(`could not bind ${source} onto ${target}`)
}

/** `umount path`; `lazy`: `umount --lazy` (detached now, freed once nothing uses it). */
export function unmountNow(path: string, lazy = false): void {
  if (libc.symbols.umount2(cPath(path), lazy ? MNT_DETACH : 0) !== 0) throw failure(`could not unmount ${path}`)
}
