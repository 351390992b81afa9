import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import type { LogFields } from '../domain/log'
import type { SecretMasks } from '../session-record/masks'
import type { SessionRow } from '../session-record/store'
import { runSetup, sandboxVariables, syncInside, type PrebuildPort, type SandboxEnvironment } from './environment'

export interface ProjectSetupDeps {
  driver: SandboxDriver
  /** The session's Project environment, read afresh each time (RuntimeDeps.environment). */
  environment?: (row: SessionRow) => Promise<SandboxEnvironment | null>
  masks?: SecretMasks
  prebuilds?: PrebuildPort
  /** A line for the session's stored log, counted as the setup's. */
  sessionLog: (id: string, turn: number, text: string) => void
  log: (line: string, fields?: LogFields) => void
}

/**
 * A session's Project environment on the runtime's side (contract section 10): which prebuilt
 * image its sandbox starts from, its variables (their values masked from then on), and its setup
 * before the first turn, whose success keeps the disk as a prebuilt image.
 */
export class ProjectSetup {
  /**
   * Per session whose Project has a setup, noted at provision: the commit its checkout gets (part of
   * a prebuilt image's key) and the prebuilt image its disk was copied from, if any.
   */
  private readonly prebuild = new Map<string, { commit: string; reused: string | null }>()

  constructor(private readonly deps: ProjectSetupDeps) {}

  /**
   * Before the sandbox is made: the prebuilt image it starts from, or null when none fits its key.
   * A code host that cannot say the commit costs the reuse, not the session: setup runs.
   */
  async baseImage(row: SessionRow): Promise<string | null> {
    if (!this.deps.prebuilds) return null
    try {
      const found = await this.deps.prebuilds.find(row)
      if (!found) return null
      this.prebuild.set(row.id, { commit: found.commit, reused: found.image?.id ?? null })
      return found.image?.image ?? null
    } catch (err) {
      this.deps.log(`no prebuilt image looked up: ${(err as Error).message}`, { session: row.id })
      return null
    }
  }

  /** The sandbox is made without its prebuilt image after all: its setup runs (and may keep a new one). */
  withoutImage(id: string): void {
    const noted = this.prebuild.get(id)
    if (noted) noted.reused = null
  }

  /** Whether the session's sandbox started from a prebuilt image (which holds its checkout). */
  reused(id: string): boolean {
    return (this.prebuild.get(id)?.reused ?? null) !== null
  }

  /** The session's Project environment, its secret values added to the session's masks first. */
  async of(row: SessionRow): Promise<SandboxEnvironment | null> {
    const env = (await this.deps.environment?.(row)) ?? null
    if (env) this.deps.masks?.add(row.id, Object.values(env.secrets))
    return env
  }

  /**
   * Before the first turn's CLI: `prepare` brings the checkout (unless the prebuilt image holds it),
   * skills and attachments (the prompt's lines naming them), then the Project's setup runs, once
   * per sandbox. Its error when it failed.
   */
  async firstTurn(
    row: SessionRow,
    handle: SandboxHandle,
    env: SandboxEnvironment | null,
    prepare: (prebuilt: boolean) => Promise<string | null>,
  ): Promise<{ attachments: string | null } | { error: string }> {
    const attachments = await prepare(this.reused(row.id))
    const error = await this.setUp(row, 1, handle, env)
    return error ? { error } : { attachments }
  }

  /**
   * Before the first turn's CLI, once the checkout and attachments are in: the Project's setup, or
   * the line saying the prebuilt image had it. Null when the turn may start, else the session's error.
   */
  async setUp(row: SessionRow, turn: number, handle: SandboxHandle, env: SandboxEnvironment | null): Promise<string | null> {
    const noted = this.prebuild.get(row.id)
    this.prebuild.delete(row.id)
    if (!env?.setup) return null
    const log = (text: string) => this.deps.sessionLog(row.id, turn, text)
    if (noted?.reused) {
      log(`setup: reused prebuilt image ${noted.reused}\n`)
      return null
    }
    log(`${new Date().toISOString()} agentd: setup started\n`)
    const result = await runSetup(
      this.deps.driver,
      handle,
      env.setup,
      sandboxVariables(env, handle, this.deps.driver.isolatesNetwork),
      env.setupTimeoutMs,
      log,
    )
    log(`${new Date().toISOString()} agentd: ${result.ok ? 'setup done' : result.error}\n`)
    if (!result.ok) return result.error
    if (noted) await this.keep(row, handle, env, noted.commit, log)
    return null
  }

  /** After a setup that exited 0: the sandbox's disk becomes a prebuilt image of the Project (a failure is logged, the turn goes on). */
  private async keep(
    row: SessionRow,
    handle: SandboxHandle,
    env: SandboxEnvironment,
    commit: string,
    log: (text: string) => void,
  ): Promise<void> {
    const { prebuilds, driver } = this.deps
    if (!prebuilds || !driver.saveDisk || !row.projectId) return
    try {
      const kept = await prebuilds.save(
        row.projectId,
        { revision: env.revision, commit, secretsDigest: env.secretsDigest },
        async (path) => {
          await syncInside(driver, handle)
          await driver.saveDisk!(handle, path)
        },
      )
      log(`${new Date().toISOString()} agentd: kept prebuilt image ${kept.id}\n`)
    } catch (err) {
      log(`${new Date().toISOString()} agentd: prebuilt image not kept: ${(err as Error).message}\n`)
    }
  }

  forget(id: string): void {
    this.prebuild.delete(id)
  }
}
