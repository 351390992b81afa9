import { dlopen, FFIType, ptr } from 'bun:ffi'
import type { Socket } from 'node:net'

/**
 * Bytes written to a socket that its peer has not read yet: agentd's own buffer plus the kernel's
 * send queue (SIOCOUTQ, for a Unix socket what the peer has not taken). The gateway relay waits for
 * none before a gVisor sandbox is frozen (see GatewayRelay.hold).
 */

const SIOCOUTQ = 0x5411

const libc = dlopen('libc.so.6', {
  ioctl: { args: [FFIType.i32, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
})

export function unreadBytes(socket: Socket): number {
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd
  let queued = 0
  if (typeof fd === 'number' && fd >= 0) {
    const out = new Int32Array(1)
    if (libc.symbols.ioctl(fd, SIOCOUTQ, ptr(out)) === 0) queued = out[0]!
  }
  return socket.writableLength + queued
}
