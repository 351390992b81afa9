import { describe, expect, test } from 'bun:test'
import { LineSplitter, MAX_LINE_BYTES, type Line } from '../../src/runtime/line-splitter'

const bytes = (text: string) => new TextEncoder().encode(text)

/** Feeds `chunks` in order and returns every line, the unterminated tail included. */
function split(chunks: Uint8Array[], max?: number): Line[] {
  const splitter = new LineSplitter(max)
  const lines = chunks.flatMap((chunk) => splitter.push(chunk))
  const tail = splitter.end()
  return tail ? [...lines, tail] : lines
}

describe('LineSplitter', () => {
  test('splits lines inside one chunk and across chunks, keeping empty lines and the unterminated tail', () => {
    const lines = split([bytes('a\nbc'), bytes('d\n\ne'), bytes('f')])
    expect(lines).toEqual([
      { text: 'a', bytes: 1, cut: false },
      { text: 'bcd', bytes: 3, cut: false },
      { text: '', bytes: 0, cut: false },
      { text: 'ef', bytes: 2, cut: false },
    ])
  })

  test('nothing pending at the end gives no tail', () => {
    const splitter = new LineSplitter()
    expect(splitter.push(bytes('one\n'))).toEqual([{ text: 'one', bytes: 3, cut: false }])
    expect(splitter.end()).toBeNull()
  })

  test('decodes a multi-byte character split between two chunks', () => {
    const euro = bytes('€\n') // e2 82 ac 0a
    const lines = split([euro.subarray(0, 1), euro.subarray(1, 2), euro.subarray(2)])
    expect(lines).toEqual([{ text: '€', bytes: 3, cut: false }])
  })

  test('invalid UTF-8 becomes U+FFFD and does not lose the rest of the line', () => {
    const lines = split([new Uint8Array([0x61, 0xff, 0x62, 0x0a])])
    expect(lines).toEqual([{ text: 'a\uFFFDb', bytes: 3, cut: false }])
  })

  test('a line over the cap keeps its first bytes, counts all of them and is marked cut; the next line is whole', () => {
    const lines = split([bytes('0123'), bytes('456789'), bytes('ab\nxy\n')], 5)
    expect(lines).toEqual([
      { text: '01234', bytes: 12, cut: true },
      { text: 'xy', bytes: 2, cut: false },
    ])
  })

  test('a line over the cap inside one chunk is cut too', () => {
    expect(split([bytes('0123456789\nok\n')], 4)).toEqual([
      { text: '0123', bytes: 10, cut: true },
      { text: 'ok', bytes: 2, cut: false },
    ])
  })

  test('a line of exactly the cap is not cut', () => {
    expect(split([bytes('01234'), bytes('\n')], 5)).toEqual([{ text: '01234', bytes: 5, cut: false }])
  })

  test('an unterminated line over the cap is cut at the end of the stream', () => {
    expect(split([bytes('0123456789')], 3)).toEqual([{ text: '012', bytes: 10, cut: true }])
  })

  test('a 64 MiB line in 64 KiB chunks keeps MAX_LINE_BYTES and leaves no chunk pinned', () => {
    const chunk = new Uint8Array(64 * 1024).fill(0x61)
    const splitter = new LineSplitter()
    const before = process.memoryUsage().rss
    for (let i = 0; i < 1024; i++) expect(splitter.push(chunk)).toEqual([])
    const grown = process.memoryUsage().rss - before
    const [line] = splitter.push(bytes('\n'))
    expect(line!.bytes).toBe(64 * 1024 * 1024)
    expect(line!.cut).toBe(true)
    expect(line!.text.length).toBe(MAX_LINE_BYTES)
    // Only the kept MiB (and allocator slack) may stay: far less than the 64 MiB that went by.
    expect(grown).toBeLessThan(32 * 1024 * 1024)
  })

  test('a kept tail is a copy: reusing the chunk buffer afterwards does not change the line', () => {
    const splitter = new LineSplitter()
    const chunk = bytes('abc')
    splitter.push(chunk)
    chunk.fill(0x7a)
    expect(splitter.push(bytes('\n'))).toEqual([{ text: 'abc', bytes: 3, cut: false }])
  })
})
