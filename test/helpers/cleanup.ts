import { rmSync } from 'node:fs'
import { settleSpareDisks, unmountUnder } from '../../sandbox/volume'

/**
 * Removes a DATA_DIR (or a drivers' root) that sandboxes used: waits for this process's spare
 * disks in the making, unmounts every disk still mounted below it (sandboxes a stopped server
 * left, spare disks), then deletes it. A server process that was stopped may still have a mount
 * helper finishing: a busy folder is unmounted again and retried for a while.
 */
export async function removeDataDir(dir: string): Promise<void> {
  await settleSpareDisks()
  for (let attempt = 0; ; attempt++) {
    unmountUnder(dir)
    try {
      rmSync(dir, { recursive: true, force: true })
      return
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EBUSY' || attempt >= 40) throw error
      await Bun.sleep(50)
    }
  }
}
