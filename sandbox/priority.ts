import { failure, libc } from './libc'

/**
 * Sandboxes run below agentd in CPU priority: a busy agent (or a hostile one spinning every core
 * it may use) then only gets the CPU the API thread leaves, and requests are answered at once.
 * The niceness is inherited by everything the sandbox starts and cannot be lowered from inside
 * (that needs CAP_SYS_NICE, which no sandbox has).
 */
export const SANDBOX_NICE = 10

/** `argv` run at the sandboxes' niceness, through nice(1). */
export function niced(argv: string[]): string[] {
  return ['nice', '-n', String(SANDBOX_NICE), ...argv]
}

/**
 * Runs `spawn` (a synchronous process start) with the calling thread at the sandboxes' niceness,
 * then puts the thread back: on Linux niceness is per thread and a new process takes its forking
 * thread's, so the child starts niced with no nice(1) to exec first (1 ms of every sandbox exec).
 * Putting it back needs CAP_SYS_NICE, so without root `argv` goes through nice(1) instead.
 */
export function spawnNiced<T>(argv: string[], spawn: (argv: string[]) => T): T {
  if (process.getuid?.() !== 0) return spawn(niced(argv))
  const tid = libc.gettid()
  const own = libc.getpriority(PRIO_PROCESS, tid) // -20..19; -1 is also an error, then nice(1) is used
  if (own === -1 || own >= SANDBOX_NICE || libc.setpriority(PRIO_PROCESS, tid, SANDBOX_NICE) !== 0) return spawn(niced(argv))
  try {
    return spawn(argv)
  } finally {
    // Never left behind: agentd's thread at the sandboxes' niceness would lose to those it must outrank.
    if (libc.setpriority(PRIO_PROCESS, tid, own) !== 0) throw failure("could not restore the niceness of agentd's thread")
  }
}

const PRIO_PROCESS = 0
