import { cPath, failure, libc } from './libc'

/**
 * Bind mounts and unmounts as the system calls themselves (mount(2), umount2(2) through libc):
 * a few microseconds each, where running mount(8) or umount(8) costs a process start, several
 * ms, on every sandbox create and remove. Loop mounts are in loop.ts.
 */

const MS_BIND = 0x1000
const MNT_DETACH = 0x2

/**
 * `mount --bind source target`. A bind ignores other flags; it copies those of the mount the source
 * is on (a sandbox disk's nosuid and nodev).
 */
export function bindMount(source: string, target: string): void {
  if (libc.mount(cPath(source), cPath(target), null, MS_BIND, null) !== 0) throw failure(`could not bind ${source} onto ${target}`)
}

/** `umount path`; `lazy`: `umount --lazy` (detached now, freed once nothing uses it). */
export function unmountNow(path: string, lazy = false): void {
  if (libc.umount2(cPath(path), lazy ? MNT_DETACH : 0) !== 0) throw failure(`could not unmount ${path}`)
}
