import { startInProcess, type TestingOptions } from './in-process'

/**
 * agentd/testing under Node: Node cannot run agentd (bun:sqlite, Bun.serve), so index.js starts
 * this under Bun. It prints one JSON line (`url`, `token`, `org`, `apiKey`) once ready, and stops
 * (leaving nothing behind) on SIGTERM, or when its parent goes (its stdin closes).
 */
const options = JSON.parse(process.argv[2] ?? '{}') as TestingOptions
const started = await startInProcess({
  ...options,
  ...(process.env.AGENTD_TESTING_LOG ? { log: (line: string) => console.error(line) } : {}),
})
const { stop, ...ready } = started
process.stdout.write(`${JSON.stringify(ready)}\n`)
let stopping = false
const end = () => {
  if (stopping) return
  stopping = true
  void stop().finally(() => process.exit(0))
}
process.on('SIGTERM', end)
process.on('SIGINT', end)
process.stdin.on('end', end)
process.stdin.on('close', end)
process.stdin.resume()
