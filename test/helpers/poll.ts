/**
 * The one way a test waits: ask again every `everyMs` until the answer is truthy, or fail after
 * `timeoutMs` naming what it waited for and the last answer. Tests wait for what the system says
 * (the API, a file, a cgroup), never for time alone.
 */
export async function poll<T>(
  what: string,
  probe: () => T | null | undefined | false | Promise<T | null | undefined | false>,
  { timeoutMs = 30_000, everyMs = 20, last = () => '' }: { timeoutMs?: number; everyMs?: number; last?: () => string } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const value = await probe()
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last() ? `; last: ${last()}` : ''}`)
    await Bun.sleep(everyMs)
  }
}

/** `read()` until `done` holds for what it read: the same poll, for reads that are the answer. */
export async function waitFor<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 30_000): Promise<T> {
  let seen: T | undefined
  const found = await poll(
    'the condition',
    async () => {
      seen = await read()
      return done(seen) ? { value: seen } : null
    },
    { timeoutMs, everyMs: 50, last: () => JSON.stringify(seen)?.slice(0, 500) ?? '' },
  )
  return found.value
}
