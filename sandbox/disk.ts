import { fstatSync, lstatSync } from 'node:fs'
import { HostDir } from './host-fs'

const MAX_DEPTH = 256

/**
 * Bytes allocated on disk under `paths` (files are counted once per path given; links not followed).
 * The trees are the sandbox's, which may swap a folder for a link while this runs: folders are
 * entered through their fd (HostDir), never through a path, so a swap can never lead the walk
 * into the host's tree. Folders deeper than MAX_DEPTH count only themselves (each level holds an fd).
 */
export function diskUsage(paths: string[]): number {
  let total = 0
  const walk = (dir: HostDir, depth: number) => {
    total += fstatSync(dir.fd).blocks * 512
    let entries
    try {
      entries = dir.entries()
    } catch {
      return
    }
    for (const entry of entries) {
      if (entry.isDirectory() && depth < MAX_DEPTH) {
        let sub: HostDir | null = null
        try {
          sub = dir.dir(entry.name)
        } catch {
          // swapped for a link or a file since the listing: counted as one below
        }
        if (sub) {
          try {
            walk(sub, depth + 1)
          } finally {
            sub.close()
          }
          continue
        }
      }
      try {
        // lstat through the folder's fd: the last component is not followed, none before is a path.
        total += lstatSync(dir.at(entry.name)).blocks * 512
      } catch {
        // gone since the listing
      }
    }
  }
  for (const path of paths) {
    let root: HostDir | null = null
    try {
      root = HostDir.open(path)
    } catch {
      // not a folder: counted as one file
    }
    if (root) {
      try {
        walk(root, 0)
      } finally {
        root.close()
      }
      continue
    }
    try {
      total += lstatSync(path).blocks * 512
    } catch {
      // missing
    }
  }
  return total
}
