import { lstatSync, readdirSync } from 'node:fs'
import { join } from 'node:path'

/** Bytes allocated on disk under `paths` (files are counted once per path given; links not followed). */
export function diskUsage(paths: string[]): number {
  let total = 0
  const walk = (path: string) => {
    let stat
    try {
      stat = lstatSync(path)
    } catch {
      return
    }
    total += stat.blocks * 512
    if (!stat.isDirectory()) return
    let names: string[]
    try {
      names = readdirSync(path)
    } catch {
      return
    }
    for (const name of names) walk(join(path, name))
  }
  for (const path of paths) walk(path)
  return total
}
