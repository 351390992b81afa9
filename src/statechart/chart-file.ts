import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'

/** The lifecycle chart as `bun run chart` drew it (an SVG, committed beside this file). */
export const CHART_SVG_PATH = join(import.meta.dir, 'chart.svg')

/** What the drawing was made from: the page refuses a drawing of another machine (see the statechart test). */
export const chartSourceDigest = (source: string): string => createHash('sha256').update(source).digest('hex')

/** The drawing, and the source digest its header names. */
export function readChart(): { svg: string; digest: string | null } {
  const text = readFileSync(CHART_SVG_PATH, 'utf8')
  return { svg: text.slice(text.indexOf('<svg')), digest: /source sha256 ([0-9a-f]{64})/.exec(text)?.[1] ?? null }
}
