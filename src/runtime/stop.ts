import type { LiveSessions } from './live'
import type { RuntimeDeps } from './runtime-deps'
import type { WarmSandboxes } from './warm-sandboxes'
import { handOver } from './handover'

/** After this long a stop says what it still waits for. */
const SLOW_STOP_MS = 10_000

/** What a stop of the runtime works on. */
export interface StopContext extends RuntimeDeps {
  live: LiveSessions
  warm: Pick<WarmSandboxes, 'close'>
  /** A session's sandbox state folder, where a handed-over turn is recorded. */
  stateDirOf: (id: string) => string
}

/**
 * The runtime's stop (SessionRuntime.shutdown): warm sandboxes closed, each turn handed over where
 * the driver keeps processes (gVisor) or else killed, and whatever still runs parked, all at once.
 */
export async function stopTurns(ctx: StopContext, deadline: number): Promise<void> {
  const { live: lives, driver, log } = ctx
  const warm = ctx.warm.close()
  // A driver whose sandboxes outlive agentd keeps each turn's processes, frozen, for the next server.
  if (driver.reattach) await Promise.all(lives.all().map(([id, live]) => handOver(ctx, id, live, ctx.stateDirOf(id), deadline)))
  // A frozen process only dies once thawed; a checkpoint holds no process to kill.
  const thaw = !driver.canCheckpoint
  // A turn paused in a sandbox that outlives the server (gVisor: checkpointed or frozen) is left as
  // it is: a kill would only be queued for its wake.
  const kept = new Set(
    lives.all().flatMap(([, live]) => (live.turn?.done && (live.turn.handedOver || (!thaw && live.parked)) ? [live.turn.done] : [])),
  )
  const waited = () => [...lives.pending.keys()].filter((p) => !kept.has(p))
  // What a slow stop waits for is said once, so an operator (or a test's log) sees it.
  let toldAt = Date.now() + SLOW_STOP_MS
  while (waited().length > 0) {
    if (Date.now() >= toldAt) {
      log(
        `agentd: the stop waits for ${waited()
          .map((p) => lives.pending.get(p))
          .join(', ')}`,
      )
      toldAt = Number.POSITIVE_INFINITY
    }
    for (const [, live] of lives.all()) {
      if (!live.turn || (live.turn.done && kept.has(live.turn.done))) continue
      live.turn.abandoned = true
      live.turn.process.kill('SIGKILL')
      if (thaw && live.handle) await driver.wake(live.handle).catch(() => {})
    }
    await Promise.race([Promise.allSettled(waited()), Bun.sleep(100)])
  }
  // Whatever still runs is parked (gVisor: checkpointed, no process while the server is down), all at once.
  const running = lives.all().filter(([, live]) => live.handle && !live.parked && !live.turn?.handedOver)
  await Promise.all(
    running.map(([id, live]) =>
      driver.park(live.handle!).catch((err) => log(`not parked at shutdown: ${(err as Error).message}`, { session: id })),
    ),
  )
  await warm
  ctx.store.events.flush()
}
