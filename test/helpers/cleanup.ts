import { existsSync, readdirSync, rmdirSync, rmSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { mountPoints, unmount, unmountUnder } from '../../sandbox/disk-image'
import { settleSpares } from '../../sandbox/spare-refill'
import { sandboxScope } from '../../src/server'

/**
 * Removes a DATA_DIR (or a drivers' root) that sandboxes used: waits for this process's spare
 * disks in the making, unmounts every disk still mounted below it (sandboxes a stopped server
 * left, spare disks), then deletes it, and the cgroup and run folders of its sandbox scope. A server process that was stopped may still have a mount
 * helper finishing: a busy folder is unmounted again and retried for a while.
 */
export async function removeDataDir(dir: string): Promise<void> {
  await settleSpares()
  for (let attempt = 0; ; attempt++) {
    unmountUnder(dir)
    try {
      rmSync(dir, { recursive: true, force: true })
      removeScope(sandboxScope(resolve(dir)))
      return
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EBUSY' || attempt >= 40) throw error
      await Bun.sleep(50)
    }
  }
}

/** Removes what a test scope leaves once its sandboxes are gone: the scope's cgroup folders and runtime folder. */
export function removeScope(scope: string, runRoot = process.getuid?.() === 0 ? '/run/agentd' : null): void {
  // Every hierarchy: runsc makes its sandboxes' cgroups in all of them (blkio, cpuset, devices…).
  const hierarchies = existsSync('/sys/fs/cgroup') ? readdirSync('/sys/fs/cgroup') : []
  for (const controller of hierarchies) {
    const dir = join('/sys/fs/cgroup', controller, 'agentd', scope)
    // A sandbox's own cgroups too, when a killed server left them (empty once its processes died).
    for (const child of existsSync(dir) ? readdirSync(dir, { withFileTypes: true }) : []) {
      if (child.isDirectory()) rmdirQuietly(join(dir, child.name))
    }
    rmdirQuietly(dir)
  }
  if (runRoot) {
    // A current runsc pins one empty network namespace for its gofers at <root>/null-netns, a bind
    // mount (stacked when sandboxes start at once) that must go before the folder can.
    unmountNullNetns(join(runRoot, scope, 'runsc'))
    rmSync(join(runRoot, scope), { recursive: true, force: true })
  }
}

function unmountNullNetns(runscRoot: string): void {
  for (let i = 0; i < 64 && mountPoints().has(join(runscRoot, 'null-netns')); i++) unmount(join(runscRoot, 'null-netns'))
}

function rmdirQuietly(dir: string): void {
  try {
    rmdirSync(dir)
  } catch {
    // not there, or still in use
  }
}
