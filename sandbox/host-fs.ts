import {
  closeSync,
  constants,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  unlinkSync,
  writeSync,
  type Dirent,
  type Stats,
} from 'node:fs'

/**
 * Host file I/O on trees a sandbox can write (its workspace, its CLI home, the gVisor io folder).
 * agentd runs as root, so it must never resolve a path through such a tree: a symlink, a hard link
 * or a FIFO planted there would make it read or write host files, or block for ever. Every walk
 * starts at a directory agentd made itself (its path is trusted) and goes down one component at a
 * time through `/proc/self/fd/<dir fd>/<name>` with O_NOFOLLOW, so no component is ever a link;
 * what it opens is fstat'ed and used only if it is a directory or a regular file with one link.
 */

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY, O_NONBLOCK, O_NOCTTY } = constants
/** Linux's value; Bun sets it anyway, but an fd of a sandbox tree must never reach a child. */
const O_CLOEXEC = 0o2000000
const DIR_FLAGS = O_RDONLY | O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC
/** A leaf may be a FIFO or a device planted to block us: never wait on the open, never take a tty. */
const LEAF_FLAGS = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC

/** A path in a sandbox tree that agentd refuses to go through (a link, a FIFO, a bad name). */
export class HostPathError extends Error {
  override name = 'HostPathError'
}

/** One path component: never empty, `.`, `..`, nor holding `/` or NUL. */
export function checkName(name: string): string {
  if (name === '' || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) {
    throw new HostPathError(`refused path component ${JSON.stringify(name)}`)
  }
  return name
}

/** `a/b/c` as checked components; '' is the tree's root. */
function components(rel: string): string[] {
  return rel === '' ? [] : rel.split('/').map(checkName)
}

const errno = (err: unknown): string | undefined => (err as NodeJS.ErrnoException)?.code

/** Usable as a file of a sandbox tree: regular, and not a hard link that could be a host file's. */
function plainFile(stat: Stats): boolean {
  return stat.isFile() && stat.nlink === 1
}

/** An open directory fd; names below it are looked up through it, never through a path. */
export class HostDir implements Disposable {
  private constructor(
    readonly fd: number,
    /** For error messages only ('' for a tree's root, so messages show the path inside it). */
    readonly label: string,
  ) {}

  /**
   * Opens `path`, a directory agentd created (its parents are trusted, the last component is
   * still not followed). Null when it does not exist.
   */
  static open(path: string, label = path): HostDir | null {
    try {
      return new HostDir(openSync(path, DIR_FLAGS), label)
    } catch (err) {
      if (errno(err) === 'ENOENT') return null
      if (errno(err) === 'ELOOP' || errno(err) === 'ENOTDIR') throw new HostPathError(`${path} is not a directory`)
      throw err
    }
  }

  /** Wraps a directory fd opened by this module (it then owns and closes it). */
  static adopt(fd: number, label: string): HostDir {
    return new HostDir(fd, label)
  }

  /** `name` as error messages show it. */
  labelOf(name: string): string {
    return this.label ? `${this.label}/${name}` : name
  }

  /** The kernel path of `name` in this directory (resolved through the fd, not through a path). */
  at(name: string): string {
    return `/proc/self/fd/${this.fd}/${checkName(name)}`
  }

  /**
   * The subdirectory `rel` (`a/b`), opened component by component without following links.
   * Null when a component is missing (and `create` is off); HostPathError when one is a link,
   * a file or anything else than a directory.
   */
  dir(rel: string, create = false): HostDir | null {
    let current: HostDir = this
    for (const name of components(rel)) {
      let next: HostDir | null = null
      try {
        next = current.child(name, create)
      } finally {
        if (current !== this) current.close()
      }
      if (!next) return null
      current = next
    }
    // '' is this folder again: a second fd of it (the magic link followed is our own fd, not a path).
    return current === this ? new HostDir(openSync(`/proc/self/fd/${this.fd}`, O_RDONLY | O_DIRECTORY | O_CLOEXEC), this.label) : current
  }

  private child(name: string, create: boolean): HostDir | null {
    const path = this.at(name)
    const label = this.labelOf(name)
    // A sandbox removing the folder as fast as we make it only costs it its own turn.
    for (let attempt = 0; ; attempt++) {
      try {
        return new HostDir(openSync(path, DIR_FLAGS), label)
      } catch (err) {
        const code = errno(err)
        if (code === 'ELOOP' || code === 'ENOTDIR') throw new HostPathError(`${label} is a link or not a directory: refused`)
        if (code !== 'ENOENT') throw err
        if (!create) return null
        if (attempt >= 5) throw new HostPathError(`${label} keeps disappearing: refused`)
      }
      try {
        // mkdir never follows a link at its last component (EEXIST): the open above then refuses it.
        mkdirSync(path, { mode: 0o755 })
      } catch (err) {
        if (errno(err) !== 'EEXIST') throw err
      }
    }
  }

  /**
   * Opens the leaf `name` for reading: a directory or a regular file with one link, else null
   * (missing, a link, a FIFO, a device, a socket, a hard link). The caller closes `fd`.
   */
  openEntry(name: string): { fd: number; stat: Stats } | null {
    let fd: number
    try {
      fd = openSync(this.at(name), LEAF_FLAGS)
    } catch (err) {
      const code = errno(err)
      // ELOOP: a symlink; ENXIO: a socket; ENOENT: gone since the listing.
      if (code === 'ENOENT' || code === 'ELOOP' || code === 'ENXIO' || code === 'EACCES' || code === 'EPERM') return null
      throw err
    }
    const stat = fstatSync(fd)
    if (stat.isDirectory() || plainFile(stat)) return { fd, stat }
    closeSync(fd)
    return null
  }

  /** Opens the regular file `name` here for reading; null when it is missing or anything else. */
  openFile(name: string): { fd: number; stat: Stats } | null {
    const entry = this.openEntry(name)
    if (entry && !entry.stat.isFile()) {
      closeSync(entry.fd)
      return null
    }
    return entry
  }

  /** The first `max` bytes of the regular file `name`, or null when it is missing or not one. */
  read(name: string, max = Number.MAX_SAFE_INTEGER): Uint8Array | null {
    const file = this.openFile(name)
    if (!file) return null
    try {
      return readFd(file.fd, Math.min(file.stat.size, max))
    } finally {
      closeSync(file.fd)
    }
  }

  /**
   * Replaces `name` here with `bytes`: written to a new temp file, then renamed over it. rename
   * replaces whatever entry `name` is (a planted link included) and never follows it.
   */
  write(name: string, bytes: Uint8Array | string, mode = 0o644): void {
    const temp = `.${name.slice(0, 100)}.agentd-${crypto.randomUUID()}`
    const fd = openSync(this.at(temp), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode)
    try {
      const data = typeof bytes === 'string' ? Buffer.from(bytes) : bytes
      for (let done = 0; done < data.length; ) done += writeSync(fd, data, done, data.length - done)
    } catch (err) {
      closeSync(fd)
      this.remove(temp)
      throw err
    }
    closeSync(fd)
    try {
      renameSync(this.at(temp), this.at(name))
    } catch (err) {
      this.remove(temp)
      if (errno(err) === 'EISDIR' || errno(err) === 'ENOTEMPTY') throw new HostPathError(`${this.labelOf(name)} is a directory: refused`)
      throw err
    }
  }

  /** Unlinks the entry `name` (a link itself, never its target); false when it is not there or a directory. */
  remove(name: string): boolean {
    try {
      unlinkSync(this.at(name))
      return true
    } catch {
      return false
    }
  }

  /** The entries of this directory (types as the directory records them, nothing followed). */
  entries(): Dirent[] {
    return readdirSync(`/proc/self/fd/${this.fd}`, { withFileTypes: true })
  }

  close(): void {
    closeSync(this.fd)
  }

  [Symbol.dispose](): void {
    this.close()
  }
}

/** Reads up to `max` bytes of `fd` from its start (less if the file is shorter by now), into `out` if given. */
export function readFd(fd: number, max: number, out: Buffer = Buffer.allocUnsafe(max)): Buffer {
  let got = 0
  while (got < max) {
    const n = readSync(fd, out, got, max - got, got)
    if (n <= 0) break
    got += n
  }
  return out.subarray(0, got)
}

/** The parent folder of `relPath` (opened, created when missing) and its leaf name. */
function parentOf(root: string, relPath: string, create: boolean): { dir: HostDir | null; leaf: string } {
  const parts = components(relPath)
  const leaf = parts.pop()
  if (leaf === undefined) throw new HostPathError('an empty path names no file')
  // Errors name the path inside the tree: they may reach the tenant, the host's layout must not.
  const top = HostDir.open(root, '')
  if (!top) {
    if (create) throw new HostPathError(`the folder for ${relPath} does not exist`)
    return { dir: null, leaf }
  }
  try {
    return { dir: top.dir(parts.join('/'), create), leaf }
  } finally {
    top.close()
  }
}

/**
 * Writes `bytes` at `relPath` under `root` (a directory agentd made), creating missing folders.
 * A planted link in place of the file is replaced; one in place of a folder is refused
 * (HostPathError): nothing outside the tree is ever written.
 */
export function writeInTree(root: string, relPath: string, bytes: Uint8Array | string, mode = 0o644): void {
  const { dir, leaf } = parentOf(root, relPath, true)
  try {
    dir!.write(leaf, bytes, mode)
  } finally {
    dir?.close()
  }
}

/** The regular file at `relPath` under `root`, or null when it is missing, a link or not a file. */
export function readFile(root: string, relPath: string, max?: number): Uint8Array | null {
  let found: { dir: HostDir | null; leaf: string }
  try {
    found = parentOf(root, relPath, false)
  } catch (err) {
    if (err instanceof HostPathError) return null
    throw err
  }
  if (!found.dir) return null
  try {
    return found.dir.read(found.leaf, max)
  } finally {
    found.dir.close()
  }
}

export interface WalkLimits {
  /** Folders deeper than this below the start are not entered (default 16). */
  maxDepth?: number
  /** Files visited at most; the walk stops there (default 1000). */
  maxFiles?: number
}

export interface TreeFile {
  /** Path below the walk's start, `/`-separated. */
  name: string
  /** Open for reading; closed once the visitor returns. */
  fd: number
  size: number
  mtimeMs: number
}

export interface WalkResult {
  files: number
  /** Entries left alone: links, FIFOs, devices, sockets, hard links, folders too deep. */
  skipped: number
  /** The walk stopped at `maxFiles`. */
  truncated: boolean
}

/**
 * Visits every regular file below `root/rel` (one open and one fstat each), in no particular
 * order. A missing start is an empty walk; a start that is a link counts as one skipped entry.
 */
export function walkFiles(root: string, rel: string, visit: (file: TreeFile) => void, limits: WalkLimits = {}): WalkResult {
  const maxDepth = limits.maxDepth ?? 16
  const maxFiles = limits.maxFiles ?? 1000
  const result: WalkResult = { files: 0, skipped: 0, truncated: false }
  let start: HostDir | null
  try {
    const top = HostDir.open(root, '')
    if (!top) return result
    try {
      start = top.dir(rel)
    } finally {
      top.close()
    }
  } catch (err) {
    if (!(err instanceof HostPathError)) throw err
    result.skipped++
    return result
  }
  if (!start) return result

  const walk = (dir: HostDir, prefix: string, depth: number): void => {
    for (const entry of dir.entries()) {
      if (result.files >= maxFiles) {
        result.truncated = true
        return
      }
      // Links, FIFOs, sockets and devices are known from the listing: never opened at all.
      if (entry.isSymbolicLink() || entry.isFIFO() || entry.isSocket() || entry.isBlockDevice() || entry.isCharacterDevice()) {
        result.skipped++
        continue
      }
      // Anything else is decided by what the open fd is (the entry may have been swapped since).
      const opened = dir.openEntry(entry.name)
      if (!opened) {
        result.skipped++
        continue
      }
      const name = prefix + entry.name
      if (opened.stat.isDirectory()) {
        if (depth >= maxDepth) {
          closeSync(opened.fd)
          result.skipped++
          continue
        }
        const sub = HostDir.adopt(opened.fd, dir.labelOf(entry.name))
        try {
          walk(sub, `${name}/`, depth + 1)
        } finally {
          sub.close()
        }
        if (result.truncated) return
        continue
      }
      try {
        result.files++
        visit({ name, fd: opened.fd, size: opened.stat.size, mtimeMs: opened.stat.mtimeMs })
      } finally {
        closeSync(opened.fd)
      }
    }
  }
  try {
    walk(start, '', 0)
  } finally {
    start.close()
  }
  return result
}
