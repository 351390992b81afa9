/** Longest attachment file name; longer names keep their start and extension. */
const MAX_NAME = 100

/**
 * A caller's file name as a safe, unique file name in the attachments folder: its last path part,
 * only letters, digits, `.`, `_` and `-` (anything else becomes `_`), never hidden, `.` or `..`,
 * and not one of `taken` (a second `a.txt` becomes `a-2.txt`).
 */
export function attachmentName(raw: string, taken: ReadonlySet<string>): string {
  const last = raw.split(/[\\/]/).pop() ?? ''
  let name = last.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^[.]+/, '')
  if (name === '') name = 'file'
  const dot = name.lastIndexOf('.')
  const ext = dot > 0 && name.length - dot <= 16 ? name.slice(dot) : ''
  const stem = (ext ? name.slice(0, dot) : name).slice(0, MAX_NAME - ext.length)
  name = `${stem}${ext}`
  for (let n = 2; taken.has(name); n++) name = `${stem.slice(0, MAX_NAME - ext.length - String(n).length - 1)}-${n}${ext}`
  return name
}
