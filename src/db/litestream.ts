import { existsSync } from 'node:fs'
import { dirname, join } from 'node:path'

/**
 * Continuous replication of the database with Litestream (the binary of the
 * `@flydotio/litestream-<platform>-<arch>` package, an optional dependency: linux-x64 is the one
 * the registry here carries): `litestream replicate <db> <url>` runs beside agentd while it runs,
 * to a `file://` folder or an `s3://` bucket (credentials from LITESTREAM_ACCESS_KEY_ID and
 * LITESTREAM_SECRET_ACCESS_KEY). agentd checkpoints PASSIVE only, which Litestream's read lock
 * lets through; `litestream restore -o <DATA_DIR>/agentd.db <url>` brings a copy back.
 */
export function litestreamBinary(): string {
  const pkg = `@flydotio/litestream-${process.platform}-${process.arch}`
  let binary: string
  try {
    binary = join(dirname(require.resolve(`${pkg}/package.json`)), 'litestream')
  } catch {
    throw new Error(`Litestream is not installed for ${process.platform}-${process.arch} (npm package ${pkg})`)
  }
  if (!existsSync(binary)) throw new Error(`Litestream's binary is missing from ${pkg} (${binary})`)
  return binary
}

/** Litestream's default: how often it copies new WAL frames to the replica. */
const SYNC_INTERVAL_MS = 1000

export interface Replication {
  stop(): Promise<void>
}

/** Starts replicating `dbPath` to `url`; its output goes to `log`, line by line. */
export function startReplication(dbPath: string, url: string, log: (line: string) => void): Replication {
  const proc = Bun.spawn([litestreamBinary(), 'replicate', dbPath, url], { stdout: 'pipe', stderr: 'pipe', env: process.env })
  const forward = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder()
    let rest = ''
    for await (const bytes of stream) {
      const lines = (rest + decoder.decode(bytes, { stream: true })).split('\n')
      rest = lines.pop() ?? ''
      for (const line of lines) if (line.trim()) log(`litestream: ${line.trim()}`)
    }
  }
  void forward(proc.stdout)
  void forward(proc.stderr)
  let stopping = false
  // Replication that stopped on its own is said, loudly: the replica falls behind from then on.
  void proc.exited.then((code) => {
    if (!stopping) log(`litestream: exited with ${code} on its own; the database is no longer replicated`)
  })
  return {
    /** Call once agentd writes no more: Litestream gets one sync interval (1 s) to copy the last writes, then stops. */
    async stop() {
      stopping = true
      await Promise.race([proc.exited, Bun.sleep(SYNC_INTERVAL_MS + 500)])
      proc.kill('SIGTERM')
      await Promise.race([proc.exited, Bun.sleep(10_000)])
      proc.kill('SIGKILL')
    },
  }
}
