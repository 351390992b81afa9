import pino from 'pino'
import { NoSandboxError } from '../sandbox'
import { ConfigError, loadConfig } from './config'
import { startServices } from './server'
import { litestreamBinary, startReplication } from './db/litestream'
import { LiteFsMount } from './region/litefs'
import type { LogFields } from './domain/log'

/**
 * JSON lines on stderr (pino): what agentd says, as `msg`, and one `request` line per answered
 * request with its id, method, path, status and time, for a log pipeline to index.
 */
// Written as they come (sync): with background writes, the lines of a stop (its handovers) were
// lost at exit under Bun, whose exit does not run the destination's flush.
const logger = pino({ base: { service: 'agentd' }, timestamp: pino.stdTimeFunctions.isoTime }, pino.destination({ dest: 2, sync: true }))
const log = (line: string, fields?: LogFields) => logger.info(fields ?? {}, line.replace(/^agentd: /, '').trimEnd())

// Whatever agentd writes under DATA_DIR (database, artifact bytes, workspaces, sandbox bundles) is
// for its own user only, including files a library or a sandboxed child creates with default modes.
process.umask(0o077)

try {
  const config = loadConfig()
  // A missing Litestream binary stops the start, before anything is served (in a LiteFS mount the
  // node refuses Litestream itself, saying why: src/region/node.ts).
  if (config.litestreamUrl && !LiteFsMount.of(config.dbPath)) litestreamBinary()
  const services = await startServices(config, { log, requestLog: (entry) => logger.info(entry, 'request') })
  const server = services.app.listen({ hostname: config.host, port: config.port })
  log(`listening on http://${config.host}:${server.server?.port ?? config.port} (data in ${config.dataDir})`)
  const started = performance.now()
  services.ready.then(
    () => log(`ready: the previous run's sessions are back (${Math.round(performance.now() - started)} ms after listening)`),
    async (err) => {
      logger.fatal(`could not bring back the previous run's sessions: ${(err as Error).stack ?? err}`)
      await replication?.stop()
      process.exit(1)
    },
  )
  // Continuous replication, for as long as this server writes the database (src/db/litestream.ts).
  const replication = config.litestreamUrl ? startReplication(config.dbPath, config.litestreamUrl, (line) => log(line)) : null
  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    try {
      // No new connection from here. Event streams stay open while turns are handed over (they
      // would hold a graceful stop for as long as their run lasts), then every connection is closed.
      void server.stop()
      await services.close()
      await server.stop(true)
    } finally {
      await replication?.stop()
      process.exit(process.exitCode ?? 0)
    }
  }
  process.on('SIGINT', stop)
  process.on('SIGTERM', stop)
  // A node whose role changed stops as at SIGTERM and exits 75 (EX_TEMPFAIL): its supervisor (LiteFS's
  // exec, systemd, Fly) starts it again, in its new role.
  void services.nodeChanged.then(async (why) => {
    log(`agentd: this node must restart: ${why}`)
    process.exitCode = 75
    await stop()
  })
} catch (err) {
  // Bad settings and a machine that cannot isolate agents: one clear line, no stack, no start.
  if (err instanceof ConfigError || err instanceof NoSandboxError) {
    console.error(`agentd: ${err.message}`)
    process.exit(2)
  }
  throw err
}
