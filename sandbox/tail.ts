import { closeSync, existsSync, openSync, readFileSync, readSync, rmSync } from 'node:fs'
import type { SandboxProcess } from './driver'

/**
 * A process whose stdout and stderr are files on the host that it appends to (`<prefix>.out`,
 * `<prefix>.err`) and whose end is a file holding its exit code (`<prefix>.exit`). The host tails
 * them into streams. Nothing holds a pipe into the sandbox, so the process can be checkpointed
 * and restored in the middle of its output; its streams just stall meanwhile.
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

  /** The host pid of the process that started it (`runsc exec`); 0 until it started. */
  pid = 0

  constructor(
    readonly prefix: string,
    private readonly onKill: (signal: NodeJS.Signals) => void,
  ) {
    this.out = new FileTail(`${prefix}.out`)
    this.err = new FileTail(`${prefix}.err`)
    this.stdout = this.out.stream
    this.stderr = this.err.stream
    this.exited = new Promise((resolve) => (this.resolveExit = resolve))
    void this.loop()
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
    this.out.drain()
    this.err.drain()
    if (note) this.err.push(new TextEncoder().encode(note.endsWith('\n') ? note : `${note}\n`))
    this.out.close()
    this.err.close()
    // Read to the end: the files go (a background process still writing keeps its own copy open).
    for (const suffix of ['.out', '.err', '.pid', '.exit', '.code']) rmSync(`${this.prefix}${suffix}`, { force: true })
    this.poke?.()
    this.resolveExit(code)
  }

  /** The exit code, once `<prefix>.exit` is there. */
  exitCode(): number | null {
    const file = `${this.prefix}.exit`
    if (!existsSync(file)) return null
    const code = Number.parseInt(readFileSync(file, 'utf8'), 10)
    return Number.isFinite(code) ? code : 1
  }

  /** The in-sandbox pid of the command (its process group), once the wrapper wrote it. */
  groupId(): number | null {
    try {
      const pid = Number.parseInt(readFileSync(`${this.prefix}.pid`, 'utf8'), 10)
      return pid > 0 ? pid : null
    } catch {
      return null
    }
  }

  private async loop(): Promise<void> {
    let quiet = 0
    while (!this.done) {
      const got = this.out.drain() + this.err.drain()
      const code = this.exitCode()
      if (code !== null) {
        this.finish(code)
        return
      }
      quiet = got > 0 ? 0 : quiet + 1
      // Folder changes poke the loop at once; the timer is the fallback (for missed events).
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(250, 10 * 2 ** Math.min(quiet, 5)))
        this.poke = () => {
          clearTimeout(timer)
          resolve()
        }
      })
      this.poke = null
    }
  }
}

/** One output file read from where it was left off, into a stream. */
class FileTail {
  readonly stream: ReadableStream<Uint8Array>
  private controller!: ReadableStreamDefaultController<Uint8Array>
  private fd: number | null = null
  private offset = 0
  private closed = false

  constructor(private readonly path: string) {
    this.stream = new ReadableStream<Uint8Array>({ start: (controller) => void (this.controller = controller) })
  }

  /** Pushes whatever was appended since the last call; returns the bytes read. */
  drain(): number {
    if (this.closed) return 0
    if (this.fd === null) {
      if (!existsSync(this.path)) return 0
      this.fd = openSync(this.path, 'r')
    }
    let total = 0
    const buffer = Buffer.allocUnsafe(64 * 1024)
    for (;;) {
      const n = readSync(this.fd, buffer, 0, buffer.length, this.offset)
      if (n <= 0) return total
      this.offset += n
      total += n
      this.push(new Uint8Array(buffer.subarray(0, n)))
    }
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
