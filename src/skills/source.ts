/** The code host whose tree, blob and raw URLs a skill may name (spec 4.1), and its raw-file host. */
export const CODE_HOST = 'github.com'
const RAW_HOST = 'raw.githubusercontent.com'

/**
 * Where a skill comes from (spec 4.1 `skills`): a folder or a SKILL.md file on the code host
 * (pinned to the commit its branch or tag points at), a SKILL.md on any https host, or a zip.
 */
export type SkillSource =
  | { kind: 'code-host'; url: string; owner: string; repo: string; ref: string; path: string; file: boolean }
  | { kind: 'file'; url: string }
  | { kind: 'zip'; url: string }

const SEGMENT = /^[A-Za-z0-9._-]+$/

/**
 * Reads a skill URL, or null when it is none of the forms. A tree URL's ref is its first segment
 * after `tree/` (a branch with a slash in its name is named by a commit or tag instead).
 */
export function skillSource(raw: string): SkillSource | null {
  let url: URL
  try {
    url = new URL(raw)
  } catch {
    return null
  }
  if (url.protocol !== 'https:' || url.username || url.password) return null
  let parts: string[]
  try {
    parts = url.pathname.split('/').slice(1).map(decodeURIComponent)
  } catch {
    return null // a malformed escape: no form of ours
  }
  if (url.hostname === CODE_HOST && !url.port) {
    const [owner, repo, kind, ref, ...path] = parts
    if (!owner || !repo || !SEGMENT.test(owner) || !SEGMENT.test(repo) || !ref || !SEGMENT.test(ref)) return null
    const inside = path.filter((p) => p !== '')
    if (inside.some((p) => p === '.' || p === '..')) return null
    if (kind === 'tree') return { kind: 'code-host', url: raw, owner, repo, ref, path: inside.join('/'), file: false }
    if (kind === 'blob' && inside.at(-1) === 'SKILL.md')
      return { kind: 'code-host', url: raw, owner, repo, ref, path: inside.join('/'), file: true }
    return null
  }
  if (url.hostname === RAW_HOST && !url.port) {
    const [owner, repo, ref, ...path] = parts
    if (
      !owner ||
      !repo ||
      !ref ||
      ![owner, repo, ref].every((p) => SEGMENT.test(p)) ||
      path.at(-1) !== 'SKILL.md' ||
      path.some((p) => p === '..' || p === '.')
    )
      return null
    return { kind: 'code-host', url: raw, owner, repo, ref, path: path.join('/'), file: true }
  }
  const last = parts.at(-1) ?? ''
  if (last === 'SKILL.md') return { kind: 'file', url: raw }
  if (last.toLowerCase().endsWith('.zip')) return { kind: 'zip', url: raw }
  return null
}
