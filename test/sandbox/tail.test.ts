import { afterEach, expect, test } from 'bun:test'
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, symlinkSync, writeFileSync, writeSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { STREAM_HIGH_WATER, TailedProcess } from '../../sandbox/tail'

const MiB = 1024 * 1024
let dir = ''
afterEach(() => rmSync(dir, { recursive: true, force: true }))

async function readAll(stream: ReadableStream<Uint8Array>): Promise<Buffer> {
  const parts: Uint8Array[] = []
  for await (const chunk of stream) parts.push(chunk)
  return Buffer.concat(parts)
}

test('a tail holds at most its high-water mark for a reader that does not read: the rest stays in the file', async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentd-tail-'))
  const prefix = join(dir, 'p1')
  writeFileSync(`${prefix}.out`, Buffer.alloc(8 * MiB, 'a'))
  writeFileSync(`${prefix}.err`, '')
  writeFileSync(`${prefix}.exit`, '7')
  const proc = new TailedProcess(prefix, () => {})
  // Nobody reads for a while: the tail loop runs many times meanwhile.
  await Bun.sleep(300)
  expect(proc.finished).toBe(false)
  // Whatever the tail had not taken yet is now 'b': the 'a's that come out are what it held.
  const fd = openSync(`${prefix}.out`, 'r+')
  writeSync(fd, Buffer.alloc(8 * MiB, 'b'), 0, 8 * MiB, 0)
  closeSync(fd)
  const [out, err, code] = await Promise.all([readAll(proc.stdout), readAll(proc.stderr), proc.exited])
  expect(code).toBe(7)
  expect(err.length).toBe(0)
  expect(out.length).toBe(8 * MiB)
  const held = out.indexOf('b'.charCodeAt(0))
  expect(held).toBeGreaterThan(0)
  expect(held).toBeLessThanOrEqual(STREAM_HIGH_WATER + 64 * 1024)
  expect(out.subarray(held).every((byte) => byte === 'b'.charCodeAt(0))).toBe(true)
})

test('a reader that cancels its stream does not hold the process: the file is read past, the exit is seen', async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentd-tail-'))
  const prefix = join(dir, 'p2')
  writeFileSync(`${prefix}.out`, Buffer.alloc(4 * MiB, 'a'))
  writeFileSync(`${prefix}.err`, '')
  const proc = new TailedProcess(prefix, () => {})
  const reader = proc.stdout.getReader()
  expect((await reader.read()).done).toBe(false)
  await reader.cancel()
  writeFileSync(`${prefix}.exit`, '0')
  expect(await proc.exited).toBe(0)
  expect(proc.finished).toBe(true)
})

test('a tail that cannot read ends the process, killed, with the reason on stderr: never one agentd waits on forever', async () => {
  dir = mkdtempSync(join(tmpdir(), 'agentd-tail-'))
  // The io folder is a link (as a sandbox could plant): it is refused, not followed.
  mkdirSync(join(dir, 'real'))
  symlinkSync(join(dir, 'real'), join(dir, 'io'))
  writeFileSync(join(dir, 'real', 'p3.out'), 'never read')
  const signals: string[] = []
  const proc = new TailedProcess(join(dir, 'io', 'p3'), (signal) => signals.push(signal))
  const [out, err, code] = await Promise.all([readAll(proc.stdout), readAll(proc.stderr), proc.exited])
  expect(code).toBe(1)
  expect(out.length).toBe(0)
  expect(err.toString()).toContain("agentd: reading the process's output failed")
  expect(signals).toEqual(['SIGKILL'])
})
