import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync, linkSync, lstatSync, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { HostPathError, readFd, readFile, walkFiles, writeInTree, type TreeFile } from '../../sandbox/host-fs'
import { diskUsage } from '../../sandbox/disk'
import { STREAM_BUDGET, TailedProcess } from '../../sandbox/tail'
import { hostCanary } from '../security/helpers'
import { tempRoot } from './helpers'

/**
 * The host side of sandbox-owned trees: every planted link, hard link and FIFO below is what a
 * hostile sandbox can make in its workspace, home or io folder; none may reach the canary.
 */

let root: ReturnType<typeof tempRoot>
let canary: ReturnType<typeof hostCanary>
beforeAll(() => {
  root = tempRoot('agentd-hostfs-')
  canary = hostCanary()
})
afterAll(async () => {
  await root[Symbol.asyncDispose]()
  canary[Symbol.dispose]()
})

/** A fresh tree (the folder agentd made for one sandbox). */
function tree(name: string): string {
  const dir = join(root.path, name)
  mkdirSync(dir, { recursive: true })
  return dir
}

function mkfifo(path: string): void {
  const made = Bun.spawnSync(['mkfifo', path])
  if (made.exitCode !== 0) throw new Error(`mkfifo ${path} failed`)
}

/** Every file walkFiles visits below `rel`, with its bytes. */
function walked(dir: string, rel: string, limits = {}): { files: Record<string, string>; result: ReturnType<typeof walkFiles> } {
  const files: Record<string, string> = {}
  const result = walkFiles(
    dir,
    rel,
    (file: TreeFile) => {
      files[file.name] = new TextDecoder().decode(readFd(file.fd, file.size))
    },
    limits,
  )
  return { files, result }
}

describe('writeInTree', () => {
  test('creates missing folders and writes the file', () => {
    const home = tree('w-new')
    writeInTree(home, '.codex/sub/config.toml', 'model = "x"\n')
    expect(readFileSync(join(home, '.codex/sub/config.toml'), 'utf8')).toBe('model = "x"\n')
    expect(statSync(join(home, '.codex/sub/config.toml')).mode & 0o777).toBe(0o644)
  })

  test('a symlink planted at the file is replaced by the file; its host target stays absent', () => {
    const home = tree('w-leaf-link')
    const target = join(canary.dir, 'written-through-leaf.json')
    mkdirSync(join(home, '.codex'))
    symlinkSync(target, join(home, '.codex/output-schema.json'))
    writeInTree(home, '.codex/output-schema.json', '{"type":"object"}')
    expect(existsSync(target)).toBe(false)
    expect(lstatSync(join(home, '.codex/output-schema.json')).isFile()).toBe(true)
    expect(readFileSync(join(home, '.codex/output-schema.json'), 'utf8')).toBe('{"type":"object"}')
  })

  test('a symlink to an existing host file is replaced; the host file keeps its bytes', () => {
    const home = tree('w-leaf-existing')
    mkdirSync(join(home, '.gemini'))
    symlinkSync(canary.path, join(home, '.gemini/settings.json'))
    writeInTree(home, '.gemini/settings.json', '{}')
    expect(readFileSync(canary.path, 'utf8')).toBe(`${canary.secret}\n`)
    expect(readFileSync(join(home, '.gemini/settings.json'), 'utf8')).toBe('{}')
  })

  test('a hard link at the file is replaced, the other name keeps the old bytes', () => {
    const home = tree('w-hardlink')
    const other = join(home, 'other')
    writeFileSync(other, 'original')
    mkdirSync(join(home, '.codex'))
    linkSync(other, join(home, '.codex/config.toml'))
    writeInTree(home, '.codex/config.toml', 'new')
    expect(readFileSync(other, 'utf8')).toBe('original')
    expect(readFileSync(join(home, '.codex/config.toml'), 'utf8')).toBe('new')
  })

  test('a symlinked folder on the way is refused and nothing lands in its target', () => {
    const home = tree('w-dir-link')
    const hostDir = join(canary.dir, 'victim')
    mkdirSync(hostDir)
    symlinkSync(hostDir, join(home, '.codex'))
    expect(() => writeInTree(home, '.codex/config.toml', 'x')).toThrow(HostPathError)
    expect(() => writeInTree(home, '.codex/deeper/config.toml', 'x')).toThrow(HostPathError)
    expect(Bun.spawnSync(['ls', '-A', hostDir]).stdout.toString()).toBe('')
  })

  test('a folder, a file or a FIFO where a folder should be is refused', () => {
    const home = tree('w-not-dir')
    writeFileSync(join(home, '.claude'), 'file')
    expect(() => writeInTree(home, '.claude/settings.json', 'x')).toThrow(HostPathError)
    mkfifo(join(home, '.gemini'))
    expect(() => writeInTree(home, '.gemini/settings.json', 'x')).toThrow(HostPathError)
    mkdirSync(join(home, 'dir.json'))
    expect(() => writeInTree(home, 'dir.json', 'x')).toThrow(HostPathError)
  })

  test('names that could leave the tree are refused', () => {
    const home = tree('w-names')
    for (const bad of ['../escape', 'a/../../escape', './x', '/etc/passwd', 'a//b', '', 'a\0b', '.codex/']) {
      expect(() => writeInTree(home, bad, 'x')).toThrow(HostPathError)
    }
    expect(existsSync(join(root.path, 'escape'))).toBe(false)
  })
})

describe('readFile', () => {
  test('reads a regular file, up to max bytes', () => {
    const dir = tree('r-plain')
    mkdirSync(join(dir, 'a'))
    writeFileSync(join(dir, 'a/f.txt'), 'hello world')
    expect(new TextDecoder().decode(readFile(dir, 'a/f.txt')!)).toBe('hello world')
    expect(new TextDecoder().decode(readFile(dir, 'a/f.txt', 5)!)).toBe('hello')
    expect(readFile(dir, 'a/missing')).toBeNull()
    expect(readFile(dir, 'missing/f.txt')).toBeNull()
  })

  test('a symlink, a hard link, a FIFO (without blocking) or a symlinked folder reads as absent', () => {
    const dir = tree('r-planted')
    symlinkSync(canary.path, join(dir, 'link'))
    linkSync(canary.path, join(dir, 'hard'))
    mkfifo(join(dir, 'fifo'))
    symlinkSync(canary.dir, join(dir, 'sub'))
    expect(readFile(dir, 'link')).toBeNull()
    expect(readFile(dir, 'hard')).toBeNull()
    expect(readFile(dir, 'fifo')).toBeNull()
    expect(readFile(dir, 'sub/canary.txt')).toBeNull()
  })
})

describe('walkFiles', () => {
  test('the artifacts folder itself a link to a host folder: nothing is visited', () => {
    const ws = tree('a-root-link')
    mkdirSync(join(ws, '.agentd'))
    symlinkSync(canary.dir, join(ws, '.agentd/artifacts'))
    const { files, result } = walked(ws, '.agentd/artifacts')
    expect(files).toEqual({})
    expect(result).toEqual({ files: 0, skipped: 1, truncated: false })
    // .agentd a link too
    const ws2 = tree('a-parent-link')
    symlinkSync(canary.dir, join(ws2, '.agentd'))
    expect(walked(ws2, 'artifacts').files).toEqual({})
  })

  test('links, hard links, FIFOs and symlinked folders inside are skipped; regular files are read', () => {
    const ws = tree('a-mixed')
    const art = join(ws, '.agentd/artifacts')
    mkdirSync(join(art, 'nested/deeper'), { recursive: true })
    writeFileSync(join(art, 'ok.txt'), 'ok')
    writeFileSync(join(art, 'nested/deeper/ok2.txt'), 'ok2')
    symlinkSync(canary.path, join(art, 'link.txt'))
    symlinkSync(canary.dir, join(art, 'dirlink'))
    linkSync(canary.path, join(art, 'hard.txt'))
    mkfifo(join(art, 'fifo'))
    const { files, result } = walked(ws, '.agentd/artifacts')
    expect(files).toEqual({ 'ok.txt': 'ok', 'nested/deeper/ok2.txt': 'ok2' })
    expect(result).toEqual({ files: 2, skipped: 4, truncated: false })
  })

  test('a missing folder is an empty walk', () => {
    expect(walked(tree('a-none'), '.agentd/artifacts').result).toEqual({ files: 0, skipped: 0, truncated: false })
  })

  test('folders deeper than maxDepth are not entered; the walk stops at maxFiles', () => {
    const ws = tree('a-limits')
    let deep = join(ws, 'art')
    for (let i = 0; i < 4; i++) {
      deep = join(deep, `d${i}`)
      mkdirSync(deep, { recursive: true })
      writeFileSync(join(deep, 'f'), String(i))
    }
    const shallow = walked(ws, 'art', { maxDepth: 2 })
    expect(Object.keys(shallow.files).sort()).toEqual(['d0/d1/f', 'd0/f'])
    expect(shallow.result.skipped).toBe(1)
    const few = walked(ws, 'art', { maxFiles: 3 })
    expect(Object.keys(few.files).length).toBe(3)
    expect(few.result.truncated).toBe(true)
  })
})

describe('diskUsage', () => {
  test('counts the files and folders of the tree, a link only as itself, never its target', () => {
    const big = join(canary.dir, 'big')
    mkdirSync(big)
    writeFileSync(join(big, 'blob'), Buffer.alloc(4 * 1024 * 1024, 1))
    const ws = tree('du')
    mkdirSync(join(ws, 'sub'))
    writeFileSync(join(ws, 'sub/own'), Buffer.alloc(1024 * 1024, 1))
    symlinkSync(big, join(ws, 'linked-dir'))
    symlinkSync(join(big, 'blob'), join(ws, 'linked-file'))
    const used = diskUsage([ws, join(root.path, 'du-missing')])
    expect(used).toBeGreaterThanOrEqual(1024 * 1024)
    expect(used).toBeLessThan(2 * 1024 * 1024)
  })
})

describe('TailedProcess on a planted io folder', () => {
  /** Collects a stream to text. */
  const text = (stream: ReadableStream<Uint8Array>) => new Response(stream).text()

  test('a .out symlink to a host file and a FIFO .err give empty streams; a FIFO .exit is ignored until a real one comes', async () => {
    const io = tree('io-planted')
    const prefix = join(io, 'p1')
    symlinkSync(canary.path, `${prefix}.out`)
    mkfifo(`${prefix}.err`)
    mkfifo(`${prefix}.exit`)
    symlinkSync(canary.path, `${prefix}.pid`)
    const proc = new TailedProcess(prefix, () => {})
    const out = text(proc.stdout)
    const err = text(proc.stderr)
    expect(proc.groupId()).toBeNull()
    expect(proc.exitCode()).toBeNull()
    // The real exit file replaces the FIFO, as the exec wrapper's `mv -f` does.
    writeFileSync(`${prefix}.code`, '3\n')
    Bun.spawnSync(['mv', '-f', `${prefix}.code`, `${prefix}.exit`])
    proc.wake()
    expect(await proc.exited).toBe(3)
    expect(await out).toBe('')
    expect(await err).toBe('')
    // Its files are unlinked, the links themselves and not their targets.
    expect(existsSync(`${prefix}.out`) || existsSync(`${prefix}.pid`)).toBe(false)
    expect(readFileSync(canary.path, 'utf8')).toBe(`${canary.secret}\n`)
  })

  test('a fast writer is read in bounded steps that let timers run, and to its very end', async () => {
    const io = tree('io-flood')
    const prefix = join(io, 'p2')
    const total = 8 * STREAM_BUDGET + 123
    writeFileSync(`${prefix}.out`, Buffer.alloc(total, 'x'))
    writeFileSync(`${prefix}.exit`, '0\n')
    const proc = new TailedProcess(prefix, () => {})
    let timerRan = false
    setTimeout(() => (timerRan = true), 0)
    let read = 0
    let afterTimer = 0
    for await (const chunk of proc.stdout) {
      read += chunk.length
      if (timerRan) afterTimer += chunk.length
    }
    expect(await proc.exited).toBe(0)
    expect(read).toBe(total)
    // Read all at once, every byte would have been there before the timer.
    expect(afterTimer).toBeGreaterThan(0)
  })
})
