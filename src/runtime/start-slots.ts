/**
 * At most `max` sandbox starts at once (AGENTD_MAX_STARTING): creates, and wakes of parked
 * sandboxes, which on gVisor are a restore as CPU-heavy as a boot. Admission already keeps the
 * sessions `allocating` within the limit; a wake comes with a follow-up or a resume instead, so it
 * waits here, in order, for a start to end.
 */
export class StartSlots {
  private running = 0
  private readonly waiting: (() => void)[] = []

  constructor(private readonly max: number) {}

  async run<T>(start: () => Promise<T>): Promise<T> {
    if (this.running < this.max) this.running++
    else await new Promise<void>((resolve) => this.waiting.push(resolve)) // the slot is handed over
    try {
      return await start()
    } finally {
      const next = this.waiting.shift()
      if (next) next()
      else this.running--
    }
  }
}
