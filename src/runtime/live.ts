import type { SandboxHandle } from '../../sandbox/driver'
import type { LogFields } from '../domain/log'
import type { LiveTurn } from './turn-end'
import type { StartedCli } from './started-cli'

/** Who wrote a line of a session's log: the CLI's stderr, agentd itself, or the Project's setup. */
export type LogWriter = 'cli' | 'agentd' | 'setup'

/** A session as this process holds it: its sandbox, the turn its CLI runs, and what it logged. */
export interface Live {
  handle?: SandboxHandle
  parked: boolean
  /** A CLI started ahead in its warm sandbox, for its first turn (started-cli.ts). */
  started?: StartedCli
  turn?: LiveTurn
  /** Sandbox operations of this session run one after the other, in the order they were asked. */
  ops: Promise<unknown>
  /** Stored log bytes by who wrote them: the CLI's stderr (or a setup's output) cannot crowd out agentd's own lines. */
  logBytes: Record<LogWriter, number>
}

/** The sessions this process holds, and the work in flight on them (a shutdown waits for it). */
export class LiveSessions {
  private readonly live = new Map<string, Live>()
  /** Operations and turns not settled yet, each with what it is (`<session>: park`), for a shutdown's log. */
  readonly pending = new Map<Promise<unknown>, string>()

  constructor(private readonly log: (line: string, fields?: LogFields) => void) {}

  get(id: string): Live | undefined {
    return this.live.get(id)
  }

  of(id: string): Live {
    let live = this.live.get(id)
    if (!live) {
      live = { parked: false, ops: Promise.resolve(), logBytes: { cli: 0, agentd: 0, setup: 0 } }
      this.live.set(id, live)
    }
    return live
  }

  all(): [string, Live][] {
    return [...this.live]
  }

  /** Runs `op` (`what` it does) after the session's earlier operations; a failure is logged, never thrown. */
  serial(id: string, what: string, op: () => Promise<void>): void {
    const live = this.of(id)
    const next = live.ops.then(op).catch((err) => this.log(`${(err as Error).stack ?? err}`, { session: id }))
    live.ops = next
    this.track(next, `${id}: ${what}`)
  }

  track(work: Promise<unknown>, label: string): void {
    this.pending.set(work, label)
    void work.finally(() => this.pending.delete(work))
  }
}
