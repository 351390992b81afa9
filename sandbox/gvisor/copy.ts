import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { basename, join } from 'node:path'
import { NotCopyable, type SandboxSpec } from '../driver'
import { copyFolder, type SandboxVolume } from '../volume'
import type { Gsandbox, SavedSandbox } from './sandbox'

/**
 * A copy of a parked gVisor sandbox (a fork): its disk image and its checkpoint (the sandbox's
 * memory: every process in it, as it was when parked) into a new sandbox's state folder, which the
 * driver then finds as after a restart: parked, restored from that checkpoint at its first wake.
 * The disk image is copied whole, so the copy's file system is the one the checkpoint was taken
 * over (same inodes, sizes and times), which a restore checks its open files against.
 */

export interface CopySetup {
  /** Parks the source the way the driver does: a checkpoint, or a freeze when one cannot be taken. */
  park(sandbox: Gsandbox): Promise<void>
  volume(spec: SandboxSpec): SandboxVolume
}

/** Copies `from` (parked first if it runs) into `spec`'s new state folder; the caller holds `from`'s lock. */
export async function copyParked(from: Gsandbox, spec: SandboxSpec, setup: CopySetup): Promise<void> {
  // Running (its park after the turn failed, or it was never parked): parked now, as the session believes it is.
  if (from.status === 'running') await setup.park(from)
  // Frozen in memory: gVisor may not have written everything to the disk yet, and a frozen sandbox cannot be asked to.
  if (from.status === 'paused')
    throw new NotCopyable('its sandbox is held in memory (it could not be checkpointed when it was parked), which cannot be copied')
  if (from.status === 'destroyed') throw new NotCopyable('its sandbox is gone')
  mkdirSync(spec.stateDir, { recursive: true })
  await setup.volume(from.spec).saveTo(setup.volume(spec).image)
  // Where the copy's disk is bound: made once the disk is, so a copy cut short is no sandbox at all.
  for (const dir of [spec.hostWorkspace, spec.hostHome]) mkdirSync(dir, { recursive: true })
  if (from.status !== 'parked') return // stopped: files only, the copy boots afresh as its source would
  // The checkpoint, and the bundle's root it was taken over (its config is written anew at the restore).
  await copyFolder(from.image, join(spec.stateDir, basename(from.image)))
  await copyFolder(from.bundle, join(spec.stateDir, basename(from.bundle)))
  // The processes restored listen where they did: the relay's port inside and the masked programs come along.
  const saved: SavedSandbox = { innerPort: from.innerPort, generation: 0, masked: from.masked }
  writeFileSync(join(spec.stateDir, 'sandbox.json'), JSON.stringify(saved))
}

/** Removes what a copy that failed left: the new disk (unmounted) and the folders. */
export async function discardCopy(spec: SandboxSpec, setup: CopySetup): Promise<void> {
  await setup.volume(spec).remove()
  for (const dir of [spec.stateDir, spec.hostWorkspace, spec.hostHome]) rmSync(dir, { recursive: true, force: true })
}
