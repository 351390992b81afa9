/**
 * Work that readies the next sandbox start (spare disk images, spare network namespaces) waits
 * until starts pause, unless its pool ran dry. Done right as a start returns, it shares the two CPUs
 * and the kernel's mount and namespace locks with that start's first process: a bwrap sandbox's
 * first exec then took 8-11 ms instead of 3-4 ms. A pool that a start left empty is refilled at
 * once instead: starts are coming faster than the pause, and the next one would otherwise make its
 * own in the foreground, in series.
 */

/** How long after the last start a refill waits: longer than a start plus its first exec. */
export const QUIET_MS = 150

/** A pool's refill: it tops the pool up to its size and returns; it catches its own failures. */
type Refill = () => Promise<void>

const waiting = new Map<string, Refill>()
const running = new Map<string, Promise<void>>()
let timer: ReturnType<typeof setTimeout> | null = null

/**
 * Refills the pool named `key`: now when `now` (the pool is empty), else once starts have paused
 * for QUIET_MS (each call, a start, pushes that moment back). A pool's refill never runs twice at
 * once: one that runs already tops the pool up to its size.
 */
export function refillSpares(key: string, refill: Refill, now: boolean): void {
  if (now) {
    waiting.delete(key)
    start(key, refill)
    return
  }
  waiting.set(key, refill)
  if (timer) clearTimeout(timer)
  timer = setTimeout(runWaiting, QUIET_MS)
  timer.unref?.() // never the reason a process stays up
}

function start(key: string, refill: Refill): void {
  if (running.has(key)) return
  const run: Promise<void> = refill()
    .catch(() => {})
    .finally(() => running.delete(key))
  running.set(key, run)
}

function runWaiting(): void {
  timer = null
  const refills = [...waiting]
  waiting.clear()
  for (const [key, refill] of refills) start(key, refill)
}

/** Runs the refills that wait now and resolves once every refill has ended (before removing a DATA_DIR, in tests). */
export async function settleSpares(): Promise<void> {
  if (timer) clearTimeout(timer)
  runWaiting()
  await Promise.allSettled([...running.values()])
}
