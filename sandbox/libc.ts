import { dlopen, FFIType, read } from 'bun:ffi'

/**
 * The few system calls agentd makes itself, through libc (mount.ts, loop.ts, sparse-file.ts,
 * spawn-in.ts): each a few microseconds where the tool that wraps it (mount(8), losetup(8),
 * nsenter(1), nice(1)) costs a process start, several ms, on every sandbox create or exec.
 */
export const libc = dlopen('libc.so.6', {
  mount: { args: [FFIType.cstring, FFIType.cstring, FFIType.cstring, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
  umount2: { args: [FFIType.cstring, FFIType.i32], returns: FFIType.i32 },
  ioctl: { args: [FFIType.i32, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
  lseek: { args: [FFIType.i32, FFIType.i64, FFIType.i32], returns: FFIType.i64 },
  setpriority: { args: [FFIType.i32, FFIType.u32, FFIType.i32], returns: FFIType.i32 },
  getpriority: { args: [FFIType.i32, FFIType.u32], returns: FFIType.i32 },
  setns: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  gettid: { args: [], returns: FFIType.i32 },
  strerror: { args: [FFIType.i32], returns: FFIType.cstring },
  __errno_location: { args: [], returns: FFIType.ptr },
}).symbols

/** A NUL-terminated copy of a path, for a `char *` argument. */
export const cPath = (path: string) => Buffer.from(`${path}\0`)

/** The errno of the call that just failed: read before anything else can set it on this thread. */
export function errno(): number {
  return read.i32(libc.__errno_location()!, 0)
}

/** An Error for the call that just failed, with its errno and the system's words for it. */
export function failure(what: string, code = errno()): Error & { errno: number } {
  return Object.assign(new Error(`${what}: ${String(libc.strerror(code))}`), { errno: code })
}
