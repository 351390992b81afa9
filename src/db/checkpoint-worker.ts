import { Database } from 'bun:sqlite'

/**
 * Runs WAL checkpoints on its own connection and thread, so the server's writes never stall on
 * one (a checkpoint inside a commit was the whole tail of event delivery latency). PASSIVE mode
 * never blocks readers or the writer; a busy checkpoint simply copies less this time.
 */
declare const self: Worker
const { path, intervalMs } = await new Promise<{ path: string; intervalMs: number }>((resolve) => {
  self.onmessage = (event: MessageEvent) => resolve(event.data)
})
const db = new Database(path)
db.exec('PRAGMA busy_timeout = 1000')
const timer = setInterval(() => {
  try {
    db.exec('PRAGMA wal_checkpoint(PASSIVE)')
  } catch {
    // The next round tries again.
  }
}, intervalMs)
self.onmessage = () => {
  clearInterval(timer)
  db.close()
  process.exit(0)
}
