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
  let meta: unknown
  try {
    meta = Bun.YAML.parse(match[1]!)
  } catch (err) {
    throw skillInvalid(index, `SKILL.md's front matter is not YAML (${(err as Error).message})`)
  }
  const { name, description } = (meta ?? {}) as { name?: unknown; description?: unknown }
  if (typeof name !== 'string' || !NAME.test(name)) throw skillInvalid(index, `SKILL.md's name must be lower-case letters, digits and hyphens, at most 64 (got ${JSON.stringify(name ?? null)})`)
  if (typeof description !== 'string' || description.trim() === '' || description.length > 1024) throw skillInvalid(index, "SKILL.md's description must be 1 to 1024 characters")
  return { name, description }
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
    yauzl.fromBuffer(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength), { lazyEntries: true, decodeStrings: true, validateEntrySizes: true, strictFileNames: true }, (err, zip) => {
      if (err || !zip) return reject(skillInvalid(index, `not a readable zip (${err?.message ?? 'empty'})`))
      const files: SkillFiles = new Map()
      let total = 0
      const fail = (why: string) => {
        zip.close()
        reject(skillInvalid(index, why))
      }
      // yauzl itself refuses `..`, absolute paths and backslashes (strictFileNames) with an error.
      zip.on('error', (e: Error) => fail(/invalid relative path|absolute path|invalid characters/.test(e.message) ? `the zip holds an unsafe path (${e.message})` : `not a readable zip (${e.message})`))
      zip.on('entry', (entry: yauzl.Entry) => {
        const name = entry.fileName
        const isDir = name.endsWith('/')
        const path = isDir ? name.slice(0, -1) : name
        if (!safePath(path)) return fail(`the zip holds an unsafe path ${JSON.stringify(name)} (absolute, .., or too deep)`)
        const mode = (entry.externalFileAttributes >>> 16) & S_IFMT
        // Made on Unix: only regular files and folders. (Made elsewhere the mode is 0: the bytes are a file.)
        if (mode !== 0 && mode !== S_IFREG && mode !== S_IFDIR) return fail(`the zip holds ${JSON.stringify(name)}, which is a link or a special file`)
        if (isDir || mode === S_IFDIR) return zip.readEntry()
        total += entry.uncompressedSize
        if (total > maxBytes || files.size >= MAX_FILES) return fail(`the skills are larger than ${maxBytes} bytes or ${MAX_FILES} files unpacked`)
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
    })
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
    size += Math.min(Bun.deflateSync(bytes as Uint8Array<ArrayBuffer>).byteLength, bytes.byteLength) + 76 + 2 * Buffer.byteLength(`${name}/${path}`)
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
