import { existsSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { getTxNumber } from 'litefs-js'

/**
 * The LiteFS mount the database lives in, as agentd reads it: `.primary` is there only on a
 * replica, and `<db>-pos` is the position this node has
 * applied, whose TXID litefs-js reads. Two of litefs-js's helpers are not used: `getInstanceInfo`
 * calls a node primary when `.primary` names the machine's own hostname, which every node of a
 * region on one machine shares; `waitForUpToDateTxNumber` (2.0.2) stops polling after its first
 * interval (its loop condition is inverted), so `caughtUp` polls itself.
 */
export class LiteFsMount {
  private constructor(
    readonly dir: string,
    readonly database: string,
  ) {}

  /**
   * The mount holding the database at `dbPath`, or null when its folder is not a LiteFS mount (no
   * `.lag`, which LiteFS serves in every mount).
   */
  static of(dbPath: string): LiteFsMount | null {
    const dir = dirname(dbPath)
    return existsSync(join(dir, '.lag')) ? new LiteFsMount(dir, basename(dbPath)) : null
  }

  /** This node holds the lease: LiteFS removes `.primary` on the primary. */
  isPrimary(): boolean {
    return !existsSync(join(this.dir, '.primary'))
  }

  /** Still mounted: a LiteFS that stopped (or restarted, to be promoted by hand) takes the database away. */
  mounted(): boolean {
    return existsSync(join(this.dir, '.lag'))
  }

  /** The TXID of the last transaction this node has applied (0 before the database exists). */
  txid(): Promise<number> {
    return existsSync(join(this.dir, `${this.database}-pos`)) ? getTxNumber(this.dir, this.database) : Promise.resolve(0)
  }

  /** Waits until this node has applied transaction `txid`; false after `ms`. */
  async caughtUp(txid: number, ms: number): Promise<boolean> {
    for (const deadline = Date.now() + ms; ; await Bun.sleep(10)) {
      if ((await this.txid()) >= txid) return true
      if (Date.now() >= deadline) return false
    }
  }
}
