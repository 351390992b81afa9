import yauzl from 'yauzl'
import { unprocessable } from '../domain/errors'

/** All of a run's skills, compressed as a zip would hold them (spec 8). */
export const MAX_PACKED_BYTES = 96 * 1024
/** All of a run's skills as files: a zip bomb of 96 KiB stops here. */
export const MAX_UNPACKED_BYTES = 4 * 1024 * 1024
/** Files in all of a run's skills together. */
export const MAX_FILES = 200

/** A skill's files by path inside its folder (`SKILL.md` at the top). */
export type SkillFiles = Map<string, Uint8Array>

export interface Skill {
  name: string
  description: string
  /** The URL the caller named. */
  url: string
  /** The commit a code-host source was pinned to; null for other hosts. */
  commit: string | null
  files: SkillFiles
  /** Its bytes as a zip would hold them (packedBytes), measured once. */
  packed: number
}

export const skillInvalid = (index: number, why: string) => unprocessable(`skills[${index}]: ${why}`, 'SKILL_INVALID')

/** Anthropic's skill name rule: lower-case letters, digits and hyphens, at most 64. */
const NAME = /^[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?$/

/**
 * A path inside a skill: relative, `/`-separated, no `.` or `..` part, no empty part, no
 * backslash or NUL, at most 8 deep and 200 characters. Anything else is refused, never cleaned.
 */
export function safePath(path: string): boolean {
  if (path.length === 0 || path.length > 200 || path.startsWith('/') || path.includes('\\') || path.includes('\0')) return false
  const parts = path.split('/')
  return parts.length <= 8 && parts.every((p) => p !== '' && p !== '.' && p !== '..')
}

/** The skill's name and description from SKILL.md's front matter; SKILL_INVALID when either is missing or bad. */
export function describe(index: number, files: SkillFiles): { name: string; description: string } {
  const manifest = files.get('SKILL.md')
  if (!manifest) throw skillInvalid(index, 'no SKILL.md at the top of the skill')
  // The front matter is a few lines; a YAML parser is never handed megabytes (or alias bombs in them).
  if (manifest.byteLength > 64 * 1024) throw skillInvalid(index, 'SKILL.md is larger than 64 KiB')
  const text = new TextDecoder().decode(manifest)
  const match = /^---\r?\n([\s\S]*?)\r?\n---(?:\r?\n|$)/.exec(text)
  if (!match) throw skillInvalid(index, 'SKILL.md has no front matter (a --- block with name and description)')
  const meta = (frontMatter(index, match[1]!) ?? {}) as { name?: unknown; description?: unknown }
  const [name, description] = [meta.name, meta.description].map((v) => (typeof v === 'string' ? v.replaceAll(STAR, '*') : v))
  if (typeof name !== 'string' || !NAME.test(name))
    throw skillInvalid(
      index,
      `SKILL.md's name must be lower-case letters, digits and hyphens, at most 64 (got ${JSON.stringify(name ?? null)})`,
    )
  if (typeof description !== 'string' || description.trim() === '' || description.length > 1024)
    throw skillInvalid(index, "SKILL.md's description must be 1 to 1024 characters")
  return { name, description }
}

/** A character no SKILL.md has a use for, which YAML reads as text wherever it reads `*` as text. */
const STAR = '\uE000'
/** An `&name` or `*name` where a YAML node starts: after a key's colon, a dash, a bracket or a comma, or at a line's start. */
const ANCHOR_OR_ALIAS = /(?:^|[:\-[{,]\s|[[{,])\s*[&*][^\s,[\]{}]/m

/**
 * The front matter's YAML, with aliases refused (contract section 11): a few bytes of aliases
 * nested on aliases stand for billions of nodes. Every `*` is read as plain text (a private-use
 * character stands in for it), so the parser never resolves an alias and nothing is expanded; an
 * alias then reads as a scalar that is the stand-in and the name of an anchor the text defines,
 * which is refused. A `*` inside text reads as before (the caller puts it back in the strings it
 * reads), and anchors no alias uses are harmless.
 */
function frontMatter(index: number, yaml: string): unknown {
  if (yaml.includes(STAR)) throw skillInvalid(index, "SKILL.md's front matter holds U+E000, which agentd does not read")
  let meta: unknown
  try {
    meta = Bun.YAML.parse(yaml.replaceAll('*', STAR))
  } catch (err) {
    // Refused either way; the sentence says which it most likely is (a merge of an alias, `<<: *b`, fails here).
    if (ANCHOR_OR_ALIAS.test(yaml)) throw aliasRefused(index)
    throw skillInvalid(index, `SKILL.md's front matter is not YAML (${(err as Error).message.replaceAll(STAR, '*')})`)
  }
  const anchors = new Set([...yaml.matchAll(/&([^\s,[\]{}]+)/g)].map((m) => m[1]!))
  if (anchors.size > 0 && holdsAlias(meta, anchors)) throw aliasRefused(index)
  return meta
}

const aliasRefused = (index: number) => skillInvalid(index, "SKILL.md's front matter uses a YAML alias (*name); aliases are refused")

/**
 * Whether a key or string of `root` is an alias read as text: the stand-in and an anchor's name.
 * Without recursion: the nesting is the caller's.
 */
function holdsAlias(root: unknown, anchors: Set<string>): boolean {
  const stack = [root]
  while (stack.length > 0) {
    const node = stack.pop()
    if (typeof node === 'string') {
      if (node.startsWith(STAR) && anchors.has(node.slice(1))) return true
    } else if (Array.isArray(node)) {
      for (const item of node) stack.push(item)
    } else if (node !== null && typeof node === 'object') {
      for (const [key, value] of Object.entries(node)) stack.push(key, value)
    }
  }
  return false
}

/** S_IFMT bits of a zip entry made on Unix (the high half of its external attributes). */
const S_IFMT = 0o170000
const S_IFREG = 0o100000
const S_IFDIR = 0o040000

/**
 * A zip's files: every entry a regular file or a folder at a safe path (a link, a device, `..`
 * or an absolute path refuses the whole zip), at most `maxBytes` unpacked. A zip whose files sit
 * in one top folder is read from inside it (as a folder zipped whole).
 */
export function unzip(index: number, bytes: Uint8Array, maxBytes: number): Promise<SkillFiles> {
  return new Promise((resolve, reject) => {
    yauzl.fromBuffer(
      Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength),
      { lazyEntries: true, decodeStrings: true, validateEntrySizes: true, strictFileNames: true },
      (err, zip) => {
        if (err || !zip) return reject(skillInvalid(index, `not a readable zip (${err?.message ?? 'empty'})`))
        const files: SkillFiles = new Map()
        let total = 0
        const fail = (why: string) => {
          zip.close()
          reject(skillInvalid(index, why))
        }
        // yauzl itself refuses `..`, absolute paths and backslashes (strictFileNames) with an error.
        zip.on('error', (e: Error) =>
          fail(
            /invalid relative path|absolute path|invalid characters/.test(e.message)
              ? `the zip holds an unsafe path (${e.message})`
              : `not a readable zip (${e.message})`,
          ),
        )
        zip.on('entry', (entry: yauzl.Entry) => {
          const name = entry.fileName
          const isDir = name.endsWith('/')
          const path = isDir ? name.slice(0, -1) : name
          if (!safePath(path)) return fail(`the zip holds an unsafe path ${JSON.stringify(name)} (absolute, .., or too deep)`)
          const mode = (entry.externalFileAttributes >>> 16) & S_IFMT
          // Made on Unix: only regular files and folders. (Made elsewhere the mode is 0: the bytes are a file.)
          if (mode !== 0 && mode !== S_IFREG && mode !== S_IFDIR)
            return fail(`the zip holds ${JSON.stringify(name)}, which is a link or a special file`)
          if (isDir || mode === S_IFDIR) return zip.readEntry()
          total += entry.uncompressedSize
          if (total > maxBytes || files.size >= MAX_FILES)
            return fail(`the skills are larger than ${maxBytes} bytes or ${MAX_FILES} files unpacked`)
          zip.openReadStream(entry, (streamErr, stream) => {
            if (streamErr || !stream) return fail(`not a readable zip (${streamErr?.message ?? 'no stream'})`)
            const chunks: Buffer[] = []
            stream.on('data', (chunk: Buffer) => chunks.push(chunk))
            stream.on('error', (e: Error) => fail(`not a readable zip (${e.message})`))
            stream.on('end', () => {
              files.set(path, new Uint8Array(Buffer.concat(chunks)))
              zip.readEntry()
            })
          })
        })
        zip.on('end', () => resolve(withoutTopFolder(files)))
        zip.readEntry()
      },
    )
  })
}

/** `folder/SKILL.md`, `folder/x` → `SKILL.md`, `x` when every file is in one top folder and SKILL.md is not at the top. */
function withoutTopFolder(files: SkillFiles): SkillFiles {
  if (files.has('SKILL.md')) return files
  const tops = new Set([...files.keys()].map((p) => p.split('/')[0]))
  if (tops.size !== 1 || [...files.keys()].some((p) => !p.includes('/'))) return files
  const top = [...tops][0]!
  return new Map([...files].map(([p, b]) => [p.slice(top.length + 1), b]))
}

/**
 * The size of one skill's files as a zip would hold them: each file deflated, plus its local and
 * central headers (30 + 46 bytes and its path twice). A zip of several adds its end record (22).
 */
export function packedBytes(name: string, files: SkillFiles): number {
  let size = 0
  for (const [path, bytes] of files) {
    size +=
      Math.min(Bun.deflateSync(bytes as Uint8Array<ArrayBuffer>).byteLength, bytes.byteLength) +
      76 +
      2 * Buffer.byteLength(`${name}/${path}`)
  }
  return size
}

/** A path that is a file and also the folder of another (`a` and `a/b`): it could not be written. */
export function pathClash(files: SkillFiles): string | null {
  for (const path of files.keys()) {
    const parts = path.split('/')
    for (let i = 1; i < parts.length; i++) {
      const folder = parts.slice(0, i).join('/')
      if (files.has(folder)) return folder
    }
  }
  return null
}
