import { rmSync } from 'node:fs'
import { NotCopyable, type SandboxHandle, type SandboxSpec } from '../../sandbox/driver'
import type { SessionInbox } from '../session-record/ports'
import type { LiveSessions } from './live'
import type { ProjectSetup } from './project-setup'
import type { RuntimeDeps } from './runtime-deps'
import { sandboxDir, sandboxSpec } from './sandbox-spec'
import type { WarmSandboxes } from './warm-sandboxes'

export type SandboxesDeps = Pick<
  RuntimeDeps,
  'driver' | 'starts' | 'store' | 'dataDir' | 'installer' | 'gateway' | 'limits' | 'egress' | 'log' | 'region' | 'masks'
>

/**
 * Sessions' sandboxes: started (from a Project's prebuilt image when it has one), parked, woken,
 * destroyed, and taken over again after a restart. What happened goes to the session's actor.
 */
export class SessionSandboxes {
  constructor(
    private readonly deps: SandboxesDeps,
    private readonly live: LiveSessions,
    private readonly project: ProjectSetup,
    private readonly inbox: () => SessionInbox,
    /** Shutting down: a failed start is not tried again. */
    private readonly closing: () => boolean,
    /** Sandboxes booted ahead, each under the id of the session that takes it. */
    private readonly warm: Pick<WarmSandboxes, 'claim' | 'discard' | 'takeStarted' | 'dropStarted'>,
  ) {}

  /** `projectId`: the session's Project, read from its row unless given (a fork's before its row exists). */
  spec(id: string, projectId = this.deps.store.get(id)?.projectId ?? null): SandboxSpec {
    const egress = this.deps.egress?.(id, projectId)
    return { ...this.plainSpec(id), ...(egress ? { egress } : {}) }
  }

  /** The sandbox every session starts from, before its Project's image or egress proxy: what a warm one is made as. */
  plainSpec(id: string): SandboxSpec {
    const { dataDir, installer, gateway, limits } = this.deps
    return sandboxSpec({ dataDir, installerRoot: installer.root, gateway, limits }, id)
  }

  /**
   * Starts the session's sandbox. A start that fails is tried once more on a clean slate: on a
   * loaded host a boot can miss its deadline once (a relay slow to come up) and make it the next
   * time; two failures fail the session with both causes.
   */
  async provision(id: string): Promise<void> {
    const causes: string[] = []
    const row = this.deps.store.get(id)
    const base = row ? await this.project.baseImage(row) : null
    const warm = await this.warm.claim(id)
    if (warm && (base || this.spec(id).egress)) await this.warm.discard(warm)
    else if (warm) {
      const started = this.warm.takeStarted(id)
      if (started) this.live.of(id).started = started
      return this.ready(id, warm)
    }
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        // A second start goes without the prebuilt image (it may have been pruned meanwhile): setup runs.
        if (attempt === 2 && base) this.project.withoutImage(id)
        const spec = { ...this.spec(id), ...(base && attempt === 1 ? { baseImage: base } : {}) }
        return await this.ready(id, await this.deps.starts.run(() => this.deps.driver.create(spec)))
      } catch (err) {
        causes.push((err as Error).message)
        this.deps.log(`sandbox start ${attempt} of 2 failed: ${(err as Error).message}`, { session: id })
        if (this.closing() || this.deps.store.get(id)?.status !== 'allocating') return
      }
    }
    const why = causes[0] === causes[1] ? `${causes[0]} (twice)` : `${causes[1]} (first attempt: ${causes[0]})`
    this.inbox().apply(id, { type: 'sandbox.failed', error: `sandbox could not start: ${why}` })
  }

  /** The session's sandbox is up: the actor hears it (and a session that went meanwhile has it destroyed). */
  private async ready(id: string, handle: SandboxHandle): Promise<void> {
    Object.assign(this.live.of(id), { handle, parked: false })
    const placed = this.deps.region ? { sandboxNode: this.deps.region.node } : {}
    if (!this.inbox().apply(id, { type: 'sandbox.ready' }, placed)) await this.destroy(id)
  }

  /** The session's sandbox handle; after a restart, found again on disk by the driver. */
  async handleOf(id: string): Promise<SandboxHandle> {
    const live = this.live.of(id)
    if (!live.handle) {
      const lost = this.lostNodeOf(id)
      // Its disk was on that node: nothing here to wake (the turn or follow-up fails saying so).
      if (lost) throw new Error(`node lost: ${lost}`)
      const recovered = await this.deps.driver.recover(this.spec(id))
      if (!recovered) throw new Error('the sandbox of this session is gone')
      Object.assign(live, { handle: recovered, parked: true })
    }
    return live.handle!
  }

  async park(id: string, announce: boolean): Promise<void> {
    const live = this.live.of(id)
    try {
      const handle = await this.handleOf(id)
      // A turn paused mid-way must come back whole: the driver keeps its processes at any cost.
      await this.deps.driver.park(handle, { keepProcesses: live.turn !== undefined })
    } catch (err) {
      // A sandbox that could not be parked is still there: the next wake picks it up either way.
      this.deps.log(`park failed, kept as it is: ${(err as Error).message}`, { session: id })
    }
    live.parked = true
    if (announce) this.inbox().apply(id, { type: 'sandbox.parked' })
  }

  async wake(id: string): Promise<void> {
    const live = this.live.of(id)
    try {
      const handle = await this.handleOf(id)
      await this.deps.starts.run(() => this.deps.driver.wake(handle))
      live.parked = false
      const row = this.deps.store.get(id)
      this.inbox().apply(id, { type: 'sandbox.woken' }, { sandboxGeneration: (row?.sandboxGeneration ?? 0) + 1 })
    } catch (err) {
      this.inbox().apply(id, { type: 'sandbox.failed', error: `the sandbox could not be woken: ${(err as Error).message}` })
    }
  }

  async destroy(id: string): Promise<void> {
    const live = this.live.get(id)
    live?.turn?.process.kill('SIGKILL')
    if (live?.started) this.warm.dropStarted(live.started)
    // A session ended before its provision (cancelled while queued) still holds the warm sandbox it took, and its CLI.
    const warm = await this.warm.claim(id)
    const started = this.warm.takeStarted(id)
    if (started) this.warm.dropStarted(started)
    const handle = live?.handle ?? warm ?? (await this.deps.driver.recover(this.spec(id)).catch(() => null))
    if (handle) await this.deps.driver.destroy(handle).catch((err) => this.deps.log(`destroy failed: ${err}`, { session: id }))
    if (live) {
      live.handle = undefined
      live.parked = false
    }
    // A destroyed sandbox takes its disk with it: workspace, CLI state home, pid file.
    rmSync(sandboxDir(this.deps.dataDir, id), { recursive: true, force: true })
    this.project.forget(id)
    this.deps.store.forget(id)
  }

  /**
   * A fork's sandbox: a copy of session `id`'s as it is parked (the driver's `copy`), held for the
   * fork `into` as a parked sandbox its first follow-up wakes. Whether the copy can go on with the
   * CLI's conversation: only where the sandbox sees its own paths (gvisor, bwrap). The CLIs record
   * absolute paths in their state (Codex its rollout files, Claude Code and Gemini CLI their
   * working folder), so in the process driver's host folders a copy would write into its source's
   * conversation or not find it.
   */
  async fork(id: string, into: string): Promise<{ conversation: boolean }> {
    // A source whose sandbox is gone (or on a lost node) can never be copied: the fork is refused, not retried.
    const handle = await this.handleOf(id).catch((err: Error) => {
      throw new NotCopyable(err.message)
    })
    // The fork's sandbox is made before its row: its egress proxy follows the source's Project, the fork's own.
    const copy = await this.deps.driver.copy(handle, this.spec(into, this.deps.store.get(id)?.projectId ?? null))
    Object.assign(this.live.of(into), { handle: copy, parked: true })
    // What the source's sandbox was given stays masked in the copy, a secret rotated since included.
    this.deps.masks?.inherit(id, into)
    return { conversation: copy.workspace !== copy.hostWorkspace && copy.home !== copy.hostHome }
  }

  /** The node this session's sandbox lived on, when that node is lost to this one (src/region). */
  lostNodeOf(id: string): string | null {
    const row = this.deps.store.get(id)
    return row && this.deps.region ? this.deps.region.lostNode(row) : null
  }

  /**
   * After a restart: takes the session's sandbox over again. The driver kills what the previous
   * server's turn left running in it and keeps the disk (and, on gVisor, background processes).
   */
  async adopt(id: string): Promise<void> {
    const live = this.live.of(id)
    if (live.handle || this.lostNodeOf(id)) return
    const handle = await this.deps.driver.recover(this.spec(id)).catch((err) => {
      this.deps.log(`sandbox not recovered: ${(err as Error).message}`, { session: id })
      return null
    })
    if (handle) Object.assign(live, { handle, parked: true })
  }
}
