import { closeSync, readSync } from 'node:fs'
import { ChunkPool } from './chunk-pool'
import { basename, dirname } from 'node:path'
import type { SandboxProcess } from './driver'
import { HostDir } from './host-fs'

/**
 * Bytes read from one output file per loop turn: a process writing as fast as it can must not
 * hold the event loop (the loop comes back at once while it is behind).
 */
export const STREAM_BUDGET = 512 * 1024

/**
 * A process whose stdout and stderr are files on the host that it appends to (`<prefix>.out`,
 * `<prefix>.err`) and whose end is a file holding its exit code (`<prefix>.exit`). The host tails
 * them into streams. Nothing holds a pipe into the sandbox, so the process can be checkpointed
 * and restored in the middle of its output; its streams just stall meanwhile.
 *
 * The folder is writable by the sandbox, which may put links, FIFOs or folders in place of these
 * files: each is opened through the folder's fd without following links and without blocking,
 * and read only when it is a regular file (otherwise it reads as absent).
 */
export class TailedProcess implements SandboxProcess {
  readonly stdout: ReadableStream<Uint8Array>
  readonly stderr: ReadableStream<Uint8Array>
  readonly exited: Promise<number>
  private readonly out: FileTail
  private readonly err: FileTail
  private resolveExit!: (code: number) => void
  private done = false
  private poke: (() => void) | null = null
  /** The io folder (agentd made it), opened once and closed when the process ends; null while it is missing. */
  private dir: HostDir | null = null
  private released = false
  private readonly name: string

  /** The host pid of the process that started it (`runsc exec`); 0 until it started. */
  pid = 0

  constructor(
    readonly prefix: string,
    private readonly onKill: (signal: NodeJS.Signals) => void,
  ) {
    this.name = basename(prefix)
    this.out = new FileTail(
      () => this.folder(),
      `${this.name}.out`,
      () => this.wake(),
    )
    this.err = new FileTail(
      () => this.folder(),
      `${this.name}.err`,
      () => this.wake(),
    )
    this.stdout = this.out.stream
    this.stderr = this.err.stream
    this.exited = new Promise((resolve) => (this.resolveExit = resolve))
    // A loop that threw would leave the process running forever for agentd: it ends it instead, saying why.
    this.loop().catch((err: unknown) => {
      this.kill('SIGKILL')
      this.finish(1, `agentd: reading the process's output failed: ${(err as Error)?.message ?? err}`)
    })
  }

  /** The exec's name: the prefix of its files in the io folder. */
  get ref(): string {
    return this.name
  }

  get finished(): boolean {
    return this.done
  }

  kill(signal: NodeJS.Signals = 'SIGKILL'): void {
    if (!this.done) this.onKill(signal)
  }

  /** Reads what is new now (called when the folder changed, or by the loop's timer). */
  wake(): void {
    this.poke?.()
  }

  /** Ends the process from outside (its sandbox died or was destroyed): `code`, with an optional last stderr note. */
  finish(code: number, note?: string): void {
    if (this.done) return
    this.done = true
    // Whatever fails below, the streams close and the exit is reported: never a process that
    // agentd waits on forever.
    try {
      // What was written last, up to one budget more whether or not the reader kept up (a sandbox
      // that died mid-flood is not read to its end).
      this.out.drain(STREAM_BUDGET, true)
      this.err.drain(STREAM_BUDGET, true)
    } catch {
      // the files went bad: what was read is all there is
    }
    if (note) this.err.push(new TextEncoder().encode(note.endsWith('\n') ? note : `${note}\n`))
    this.out.close()
    this.err.close()
    try {
      // Read to the end: the files go (a background process still writing keeps its own copy open).
      // Unlinked through the folder's fd: a planted link goes itself, never its target.
      for (const suffix of ['.out', '.err', '.pid', '.exit', '.code']) this.dir?.remove(`${this.name}${suffix}`)
      this.dir?.close()
    } catch {
      // left for the sandbox's removal
    }
    this.dir = null
    this.released = true
    this.poke?.()
    this.resolveExit(code)
  }

  /** The exit code, once `<prefix>.exit` is there (as a regular file). */
  exitCode(): number | null {
    const text = this.small('.exit')
    if (text === null) return null
    const code = Number.parseInt(text, 10)
    return Number.isFinite(code) ? code : 1
  }

  /** The in-sandbox pid of the command (its process group), once the wrapper wrote it. */
  groupId(): number | null {
    const pid = Number.parseInt(this.small('.pid') ?? '', 10)
    return pid > 0 ? pid : null
  }

  /** The first bytes of `<prefix><suffix>` when it is a regular file; null otherwise. */
  private small(suffix: string): string | null {
    const bytes = this.folder()?.read(`${this.name}${suffix}`, 64)
    return bytes ? new TextDecoder().decode(bytes) : null
  }

  private folder(): HostDir | null {
    if (this.released) return null
    this.dir ??= HostDir.open(dirname(this.prefix))
    return this.dir
  }

  private async loop(): Promise<void> {
    let quiet = 0
    while (!this.done) {
      // The exit file first: once it is there, the drains below reach everything written before it.
      const code = this.exitCode()
      const out = this.out.drain(STREAM_BUDGET)
      const err = this.err.drain(STREAM_BUDGET)
      const behind = out.more || err.more
      if (code !== null && !behind) {
        this.finish(code)
        return
      }
      quiet = out.read + err.read > 0 ? 0 : quiet + 1
      // Folder changes poke the loop at once; the timer is the fallback (for missed events).
      // Behind a fast writer, the next turn comes at once, after whatever else is waiting to run;
      // behind a slow reader (a stream full), when the reader takes some (its pull pokes the loop).
      const full = out.full || err.full
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, behind && !full ? 0 : Math.min(250, 10 * 2 ** Math.min(quiet, 5)))
        this.poke = () => {
          clearTimeout(timer)
          resolve()
        }
      })
      this.poke = null
    }
  }
}

/**
 * Bytes a tail holds for its reader before it stops reading the file: a reader slower than the
 * sandbox's writer (a flood) leaves the rest on the sandbox's disk, not in agentd's memory.
 */
export const STREAM_HIGH_WATER = 1024 * 1024

/** One output file read from where it was left off, into a stream that holds at most STREAM_HIGH_WATER bytes. */
class FileTail {
  readonly stream: ReadableStream<Uint8Array>
  private controller!: ReadableStreamDefaultController<Uint8Array>
  private fd: number | null = null
  private offset = 0
  private closed = false
  /** The reader cancelled the stream: the file is still read to its end (to see the exit), and dropped. */
  private readerGone = false
  /** The last drain stopped for want of room. */
  private waiting = false
  /** Read buffers: what STREAM_HIGH_WATER holds, and a few the reader is handling. */
  private readonly pool = new ChunkPool(64 * 1024, STREAM_HIGH_WATER / (64 * 1024) + 4)

  constructor(
    private readonly folder: () => HostDir | null,
    private readonly name: string,
    onPull: () => void,
  ) {
    this.stream = new ReadableStream<Uint8Array>(
      {
        start: (controller) => void (this.controller = controller),
        // Only a tail that stopped for want of room needs the loop at once when the reader takes some.
        pull: () => {
          if (!this.waiting) return
          this.waiting = false
          onPull()
        },
        cancel: () => {
          this.readerGone = true
          onPull()
        },
      },
      new ByteLengthQueuingStrategy({ highWaterMark: STREAM_HIGH_WATER }),
    )
  }

  /**
   * Pushes up to `budget` bytes of what was appended since the last call, no more than the stream
   * has room for unless `anyway`. `more`: it stopped before the file's end (budget or room);
   * `full`: for want of room.
   */
  drain(budget: number, anyway = false): { read: number; more: boolean; full: boolean } {
    if (this.closed) return { read: 0, more: false, full: false }
    if (this.fd === null) {
      // Only ever a regular file: a link or a FIFO in its place is never opened (an empty stream).
      const file = this.folder()?.openFile(this.name)
      if (!file) return { read: 0, more: false, full: false }
      this.fd = file.fd
    }
    const drop = this.readerGone
    const limit = anyway || drop ? budget : Math.min(budget, Math.max(0, this.controller.desiredSize ?? 0))
    let total = 0
    while (total < limit) {
      // Read straight into the chunk the stream hands on (no copy), a pooled one its reader gives back.
      const whole = this.pool.take()
      const n = readSync(this.fd, whole, 0, Math.min(whole.length, limit - total), this.offset)
      if (n <= 0) {
        this.pool.putBack(whole)
        this.waiting = false
        return { read: total, more: false, full: false }
      }
      this.offset += n
      total += n
      if (drop) this.pool.putBack(whole)
      else this.push(this.pool.lend(whole.subarray(0, n), whole))
    }
    this.waiting = limit < budget
    return { read: total, more: true, full: this.waiting }
  }

  push(bytes: Uint8Array): void {
    if (this.closed) return
    try {
      this.controller.enqueue(bytes)
    } catch {
      // the reader cancelled the stream
    }
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    if (this.fd !== null) closeSync(this.fd)
    try {
      this.controller.close()
    } catch {
      // the reader cancelled the stream
    }
  }
}
