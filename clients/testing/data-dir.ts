import { createDriver } from '../../sandbox'
import { ProcessDriver } from '../../sandbox/process'
import { existsSync, readdirSync, rmdirSync, rmSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { mountPoints, unmount, unmountUnder } from '../../sandbox/disk-image'
import { settleSpares } from '../../sandbox/spare-refill'
import { sandboxScope } from '../../src/server'

/**
 * What agentd's tests and `agentd/testing` remove after a server: its sandboxes and its DATA_DIR,
 * leaving nothing mounted, no cgroup and no run folder behind.
 */

/**
 * Removes every sandbox of a driver's scope, parked ones included, once its app is closed: a
 * fresh driver on the same scope tracks none of them as live.
 */
export async function sweepScope(driver: { kind: string; scope?: string; sweep?(live: string[]): Promise<string[]> }): Promise<void> {
  if (driver.kind === 'process' && driver.scope) await new ProcessDriver({ scope: driver.scope }).sweep([])
  // A fresh driver: the app's own still tracks its sandboxes as live and would keep their disks mounted.
  else if ((driver.kind === 'gvisor' || driver.kind === 'bwrap') && driver.scope)
    await createDriver(driver.kind, () => {}, { scope: driver.scope }).sweep([])
  else await driver.sweep?.([])
  // And the scope's own cgroup folders and runtime files, so runs do not pile them up on the machine.
  if (driver.scope) removeScope(driver.scope)
}

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
