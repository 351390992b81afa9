import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs'
import { failure, libc } from './libc'
import { niced, SANDBOX_NICE } from './priority'

/**
 * Starting a sandbox's process already in its place (its network namespace, the sandboxes'
 * niceness) without a program to exec first for each: on Linux both are attributes of a thread,
 * and a new process takes those of the thread that forks it. The thread takes them on for the
 * spawn (a synchronous fork and exec) and drops them right after; nsenter(1) and nice(1) were
 * 2 ms of every bwrap exec. Dropping them again needs CAP_SYS_ADMIN and CAP_SYS_NICE, so without
 * both (not root, or root in a container that lacks them) the programs are used as before.
 */

/** Where a process starts: in the network namespace of process `netPid`, at the sandboxes' niceness. */
export interface Placement {
  netPid?: number
  /** That namespace's identity (`net:[inode]`): a pid reused by another process is never entered. */
  netns?: string
  niced?: boolean
}

const CLONE_NEWNET = 0x40000000
const PRIO_PROCESS = 0

/** Runs `argv` in the network namespace that process `netPid` is in, through nsenter(1). */
export function nsenterArgs(netPid: number, argv: string[]): string[] {
  return ['nsenter', `--net=/proc/${netPid}/ns/net`, '--', ...argv]
}

/** `argv` wrapped in the programs that place it (what runs when the thread cannot). */
export function placedArgs(argv: string[], place: Placement): string[] {
  const entered = place.netPid === undefined ? argv : nsenterArgs(place.netPid, argv)
  return place.niced ? niced(entered) : entered
}

const CAP_SYS_ADMIN = 21n
const CAP_SYS_NICE = 23n

/** Whether the effective capabilities in a `/proc/<pid>/status` text hold CAP_SYS_ADMIN and CAP_SYS_NICE. */
export function canPlaceThread(status: string): boolean {
  const hex = /^CapEff:\s*([0-9a-f]+)$/m.exec(status)?.[1]
  if (!hex) return false
  const caps = BigInt(`0x${hex}`)
  return ((caps >> CAP_SYS_ADMIN) & 1n) === 1n && ((caps >> CAP_SYS_NICE) & 1n) === 1n
}

const threadPlaceable = canPlaceThread(readFileSync('/proc/self/status', 'utf8'))

/** Runs `spawn` with the process placed (see above); `spawn` gets the argv to start. */
export function spawnPlaced<T>(argv: string[], place: Placement, spawn: (argv: string[]) => T): T {
  if (!threadPlaceable) return spawn(placedArgs(argv, place))
  const tid = libc.gettid()
  const ownNice = libc.getpriority(PRIO_PROCESS, tid) // -20..19; -1 is also an error: then nice(1)
  const ownNet = place.netPid === undefined ? -1 : openSync('/proc/thread-self/ns/net', constants.O_RDONLY)
  let entered = false
  let reniced = false
  try {
    if (place.netPid !== undefined) {
      const net = openSync(`/proc/${place.netPid}/ns/net`, constants.O_RDONLY)
      try {
        if (place.netns !== undefined && `net:[${fstatSync(net).ino}]` !== place.netns)
          throw new Error(`process ${place.netPid} is no longer in the sandbox's network namespace`)
        if (libc.setns(net, CLONE_NEWNET) !== 0) throw failure(`could not enter the network namespace of ${place.netPid}`)
        entered = true
      } finally {
        closeSync(net)
      }
    }
    if (place.niced && ownNice !== -1 && ownNice < SANDBOX_NICE) reniced = libc.setpriority(PRIO_PROCESS, tid, SANDBOX_NICE) === 0
    return spawn(placedArgs(argv, { niced: place.niced && !reniced }))
  } finally {
    if (reniced && libc.setpriority(PRIO_PROCESS, tid, ownNice) !== 0) stranded('its niceness')
    if (entered && libc.setns(ownNet, CLONE_NEWNET) !== 0) stranded('its network namespace')
    if (ownNet !== -1) closeSync(ownNet)
  }
}

/**
 * agentd's thread could not get its own attributes back: left in a sandbox's network namespace, its
 * next connection (a webhook, the code host) would go where the sandbox listens. It stops instead.
 */
function stranded(what: string): never {
  console.error(
    `agentd: FATAL could not give agentd's thread back ${what} after starting a sandbox process (${failure('').message}); stopping`,
  )
  process.exit(70)
}
