import { rmSync } from 'node:fs'
import type { SandboxDriver, SandboxHandle, SandboxSpec } from '../../sandbox/driver'
import type { Harness } from '../domain/harness'
import { newId } from '../domain/ids'
import type { StartSlots } from './start-slots'
import type { StartedCli } from './started-cli'
import { sandboxDir } from './sandbox-spec'

export interface WarmDeps {
  driver: SandboxDriver
  /** Warm boots take start slots like any create (AGENTD_MAX_STARTING). */
  starts: StartSlots
  dataDir: string
  /** The plain sandbox of session `id`: no Project image, no egress proxy. */
  spec: (id: string) => SandboxSpec
  log: (line: string) => void
  /** Starts the CLI of `harness` ahead in a booted warm sandbox (started-cli.ts); null: none is for it; absent: none ever is. */
  startCli?: (handle: SandboxHandle, harness: Harness) => StartedCli | null
  /** The harness whose CLI is started ahead until a create asks for one. */
  firstCli?: Harness
  /** Ends a started CLI no session took. */
  dropCli?: (started: StartedCli) => void
  /** A turn runs: a CLI's start (seconds of CPU on gVisor) waits until none does, not to slow it. */
  busy?: () => boolean
}

/** How often a CLI waiting to be started ahead looks whether the host is still busy. */
const CLI_START_POLL_MS = 250

/** After a warm boot fails, none is tried again for this long (a broken runsc must not boot in a loop). */
const RETRY_AFTER_FAILURE_MS = 30_000

/**
 * Sandboxes booted ahead of the sessions that will take them (AGENTD_WARM_SANDBOXES). Each is made
 * under the id its session will have: a create takes its id from here (`sessionId`), and the
 * session's provision finds the sandbox booted, or booting (`claim`), so nothing is renamed.
 *
 * A warm sandbox holds nothing of any Project: it is made before its session exists, from the plain
 * spec every session starts from, handed to one session only and never returned. A Project's
 * variables, secrets and checkout reach it afterwards, on that session's own path. A session whose
 * sandbox must be made otherwise (from its Project's prebuilt image, or with an egress proxy) has
 * its warm one destroyed and a sandbox made as before.
 */
export class WarmSandboxes {
  /** Booted or booting, not handed out yet: id → its boot (null once it failed). */
  private readonly pool = new Map<string, Promise<SandboxHandle | null>>()
  /** Handed to a new session (its id taken), not yet claimed by that session's provision. */
  private readonly taken = new Map<string, Promise<SandboxHandle | null>>()
  /** Ids in the pool whose boot has finished. */
  private readonly bootedIds = new Set<string>()
  /** The CLI started ahead in each warm sandbox that has one, by its id, until a session takes it. */
  private readonly started = new Map<string, StartedCli>()
  /** Booted warm sandboxes whose CLI waits for the host to be idle to start. */
  private readonly cliPending = new Map<string, SandboxHandle>()
  private cliTimer: ReturnType<typeof setTimeout> | null = null
  private running = false
  private failedAt = Number.NEGATIVE_INFINITY
  /** The harness the last create asked for: a warm sandbox's CLI is started for it (none where it has no such CLI). */
  private wanted: Harness | undefined

  constructor(
    private readonly deps: WarmDeps,
    readonly size: number,
  ) {
    this.wanted = deps.firstCli
  }

  /** Starts filling the pool (after the start-up sweep, which would remove what it made before). */
  start(): void {
    this.running = true
    this.refill()
  }

  /**
   * The id for a new session of `harness`: one whose sandbox is warm when the pool has one (a
   * booted one with that harness's CLI started and still waiting first, then a booted one). The
   * next CLI started ahead is that harness's: a host's sessions mostly ask for the harness they
   * asked for last (a create refused afterwards counts too: it still says what callers ask for).
   */
  sessionId(harness?: Harness): string {
    if (harness) this.wanted = harness
    const ids = [...this.pool.keys()]
    const id =
      (harness && ids.find((p) => this.started.get(p)?.harness === harness && !this.started.get(p)?.ended)) ||
      ids.find((p) => this.bootedIds.has(p)) ||
      this.pool.keys().next().value
    if (id === undefined) return newId()
    this.bootedIds.delete(id)
    this.cliPending.delete(id)
    this.taken.set(id, this.pool.get(id)!)
    this.pool.delete(id)
    this.refill()
    return id
  }

  /**
   * Session `id` was never stored (its create was refused, or answered by a replay): the sandbox
   * it took is destroyed. The pool refilled when the id was taken, so it is not wanted back.
   */
  giveBack(id: string): void {
    const boot = this.taken.get(id)
    if (!boot) return
    this.taken.delete(id)
    void boot.then((handle) => handle && this.discard(handle))
  }

  /** The warm sandbox made for session `id`, once booted; null when it has none (or its boot failed). */
  async claim(id: string): Promise<SandboxHandle | null> {
    const boot = this.taken.get(id)
    if (!boot) return null
    this.taken.delete(id)
    return boot
  }

  /** The CLI started ahead in session `id`'s warm sandbox, handed over once; null when it has none. */
  takeStarted(id: string): StartedCli | null {
    const started = this.started.get(id) ?? null
    this.started.delete(id)
    return started
  }

  /** Ends a started CLI no session will use (its wait at the gateway too). */
  dropStarted(started: StartedCli): void {
    this.deps.dropCli?.(started)
  }

  /** A warm sandbox its session cannot use: destroyed with its folder, so the session's own is made afresh. */
  async discard(handle: SandboxHandle): Promise<void> {
    const started = this.takeStarted(handle.id)
    if (started) this.dropStarted(started)
    await this.deps.driver.destroy(handle).catch((err) => this.deps.log(`a warm sandbox was not destroyed: ${err}`))
    rmSync(sandboxDir(this.deps.dataDir, handle.id), { recursive: true, force: true })
  }

  /** How many booted ones hold a CLI started ahead, waiting for its session. */
  get startedClis(): number {
    return [...this.started.values()].filter((started) => !started.ended).length
  }

  /** How many are booted and waiting for a session. */
  get booted(): number {
    return this.bootedIds.size
  }

  private refill(): void {
    if (Date.now() - this.failedAt < RETRY_AFTER_FAILURE_MS) return
    while (this.running && this.pool.size < this.size) {
      const id = newId()
      const boot = this.deps.starts
        .run(() => this.deps.driver.create(this.deps.spec(id)))
        .then((handle) => {
          if (this.pool.has(id)) this.bootedIds.add(id)
          // Started once the sandbox is up and no turn runs, outside the start slot: the CLI loads while the sandbox waits.
          if (this.deps.startCli && this.running && this.pool.has(id)) {
            this.cliPending.set(id, handle)
            this.startClis()
          }
          return handle
        })
        .catch((err: Error) => {
          this.deps.log(`agentd: a warm sandbox did not start: ${err.message}`)
          this.failedAt = Date.now()
          this.pool.delete(id)
          rmSync(sandboxDir(this.deps.dataDir, id), { recursive: true, force: true })
          return null
        })
      this.pool.set(id, boot)
    }
  }

  /** Starts the CLIs of booted warm sandboxes once no turn runs (looking again every CLI_START_POLL_MS). */
  private startClis(): void {
    if (this.cliTimer || this.cliPending.size === 0 || !this.running) return
    if (this.deps.busy?.()) {
      this.cliTimer = setTimeout(() => {
        this.cliTimer = null
        this.startClis()
      }, CLI_START_POLL_MS)
      this.cliTimer.unref?.()
      return
    }
    for (const [id, handle] of this.cliPending) {
      this.cliPending.delete(id)
      if (!this.pool.has(id)) continue
      try {
        const started = this.wanted ? this.deps.startCli!(handle, this.wanted) : null
        if (started) this.started.set(id, started)
      } catch (err) {
        this.deps.log(`agentd: a CLI was not started ahead in a warm sandbox: ${(err as Error).message}`)
      }
    }
  }

  /** Stops refilling and destroys every warm sandbox no session's provision has claimed. */
  async close(): Promise<void> {
    this.running = false
    if (this.cliTimer) clearTimeout(this.cliTimer)
    this.cliTimer = null
    this.cliPending.clear()
    const unclaimed = [...this.pool.values(), ...this.taken.values()]
    this.pool.clear()
    this.taken.clear()
    this.bootedIds.clear()
    await Promise.all(
      unclaimed.map(async (boot) => {
        const handle = await boot
        if (handle) await this.discard(handle)
      }),
    )
  }
}
