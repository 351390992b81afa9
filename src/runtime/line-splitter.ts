/**
 * Splits a CLI's stdout, a byte stream the sandbox controls, into lines without letting one line
 * cost more than a bounded amount of memory or time: at most `maxLineBytes` of the current line
 * are kept, the rest is counted and dropped until the next newline, and every byte is looked at
 * once (Buffer.indexOf from where the last search stopped, never a rescan of kept bytes).
 */

/** The most of one stdout line agentd keeps (1 MiB); the rest of the line is dropped. */
export const MAX_LINE_BYTES = 1024 * 1024

export interface Line {
  /** The line's text without its newline, decoded from its first `maxLineBytes` bytes at most. */
  text: string
  /** How many bytes the whole line had, newline excluded. */
  bytes: number
  /** True when `bytes` was over the cap and `text` holds only its start. */
  cut: boolean
}

export class LineSplitter {
  /** The kept start of the current line, in pieces; at most `maxLineBytes` in all. */
  private parts: Uint8Array[] = []
  private kept = 0
  /** All bytes of the current line seen so far, kept or dropped. */
  private seen = 0
  // Invalid UTF-8 (or a character cut at the cap) becomes U+FFFD rather than an error: the
  // bytes are the sandbox's, and a bad byte must not lose the rest of the line.
  private readonly decoder = new TextDecoder('utf-8')

  constructor(private readonly maxLineBytes = MAX_LINE_BYTES) {}

  /** Feeds a chunk; returns the lines it completed, in order. */
  push(chunk: Uint8Array): Line[] {
    const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
    const lines: Line[] = []
    let start = 0
    while (start < bytes.length) {
      const newline = bytes.indexOf(10, start)
      const end = newline < 0 ? bytes.length : newline
      if (newline >= 0 && this.seen === 0 && end - start <= this.maxLineBytes) {
        // The common case, a whole line inside this chunk: decode it in place.
        lines.push({ text: this.decoder.decode(bytes.subarray(start, end)), bytes: end - start, cut: false })
      } else {
        this.keep(bytes, start, end, newline < 0)
        if (newline >= 0) lines.push(this.take())
      }
      if (newline < 0) break
      start = newline + 1
    }
    return lines
  }

  /** The last line when the stream ended without a newline; null when nothing is pending. */
  end(): Line | null {
    return this.seen > 0 ? this.take() : null
  }

  /** Counts bytes [start, end) of the current line, keeping what fits under the cap. */
  private keep(bytes: Buffer, start: number, end: number, copy: boolean): void {
    this.seen += end - start
    const room = Math.min(this.maxLineBytes - this.kept, end - start)
    if (room <= 0) return
    const piece = bytes.subarray(start, start + room)
    // A piece that outlives this call is copied, so a kept tail never pins a whole large chunk.
    this.parts.push(copy ? Uint8Array.prototype.slice.call(piece) : piece)
    this.kept += room
  }

  private take(): Line {
    const whole = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.kept)
    const line = { text: this.decoder.decode(whole), bytes: this.seen, cut: this.seen > this.kept }
    this.parts = []
    this.kept = 0
    this.seen = 0
    return line
  }
}
