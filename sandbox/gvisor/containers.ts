import { existsSync, rmSync } from 'node:fs'
import { cgroupName, listSandboxCgroups, SandboxCgroup } from '../cgroup'
import { sandboxNameOf } from './spec'
import { relayDir } from '../relay'
import type { Runsc } from './runsc'
import type { VolumeRegistry } from '../volume'

/**
 * The host's side of the gVisor driver's containers: each one's cgroups, and their removal: one
 * old container in the background (retireContainer), every one of a sandbox (killSandboxCgroups),
 * and whatever sandboxes no longer live left behind (sweepGvisor).
 */

/** The host cgroups runsc made for container `cid` in `scope` (its sentry, gofer and their children run there). */
export function containerCgroup(scope: string, cid: string): SandboxCgroup {
  return new SandboxCgroup(`agentd/${scope}/${cid}`)
}

/**
 * Deletes an old container in the background (`runsc delete` waits until the host's init reaped
 * it: a second or more). A frozen one's processes are killed first (killAll thaws them dead): a
 * frozen sentry answers no runsc command, and what a lost turn left must not run on a moment.
 */
export function retireContainer(runsc: Runsc, scope: string, cid: string): void {
  void (async () => {
    const cgroup = containerCgroup(scope, cid)
    if (cgroup.frozen()) await cgroup.killAll()
    await runsc.delete(cid)
    await cgroup.remove()
  })().catch(() => {})
}

/** What a sweep reaches of the gVisor driver: its runsc state, cgroups, relay sockets and disks. */
export interface SweepScope {
  runsc: Runsc
  scope: string
  relayRoot: string
  volumes: VolumeRegistry
}

/**
 * Removes what the driver left for sandboxes not in `keepIds` (containers, cgroups, relay
 * sockets, disks), within its scope. Returns the sandbox names it removed.
 */
export async function sweepGvisor(at: SweepScope, keepIds: string[]): Promise<string[]> {
  const keep = new Set(keepIds.map(cgroupName))
  const removed = new Set<string>()
  for (const cid of await at.runsc.list()) {
    const name = sandboxNameOf(cid)
    if (name === null || keep.has(name)) continue
    await at.runsc.delete(cid)
    removed.add(name)
  }
  for (const cgroup of listSandboxCgroups(`agentd/${at.scope}`)) {
    const name = sandboxNameOf(cgroup)
    if (name === null || keep.has(name)) continue
    await containerCgroup(at.scope, cgroup).remove()
    removed.add(name)
  }
  if (existsSync(at.relayRoot)) {
    const keepDirs = new Set(keepIds.map((id) => relayDir(at.relayRoot, id)))
    for (const dir of new Bun.Glob('*').scanSync({ cwd: at.relayRoot, onlyFiles: false, absolute: true })) {
      if (!keepDirs.has(dir)) rmSync(dir, { recursive: true, force: true })
    }
  }
  // Disks of sandboxes no longer live, once their processes are gone.
  for (const name of await at.volumes.sweep(keep)) removed.add(name)
  return [...removed]
}

/** Kills every process of every container of sandbox `name` in `scope` (its sentry, gofer and all). */
export async function killSandboxCgroups(scope: string, name: string): Promise<void> {
  for (const cgroup of listSandboxCgroups(`agentd/${scope}`)) {
    if (sandboxNameOf(cgroup) === name) await containerCgroup(scope, cgroup).killAll()
  }
}
