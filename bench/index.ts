/**
 * `bun run bench`: runs every `bench/*.ts` except this file, one after another, each as its own
 * `bun` process so one bench's servers and load never overlap another's. Exits non-zero only when
 * a bench crashed; a missed goal is reported by the bench itself and is not a failure.
 */
import { readdirSync } from 'node:fs'
import { basename, join } from 'node:path'

const dir = import.meta.dir
const self = basename(import.meta.path)
const only = process.argv.slice(2)
const files = readdirSync(dir)
  .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts') && f !== self)
  .filter((f) => only.length === 0 || only.some((o) => f === o || f === `${o}.ts`))
  .sort()

if (files.length === 0) console.log('bench: nothing to run')
const failed: string[] = []
for (const file of files) {
  console.log(`\n=== bench/${file} ===`)
  const started = performance.now()
  const proc = Bun.spawn([process.execPath, join(dir, file)], { cwd: join(dir, '..'), stdio: ['inherit', 'inherit', 'inherit'] })
  const code = await proc.exited
  const seconds = ((performance.now() - started) / 1000).toFixed(1)
  if (code !== 0) failed.push(`${file} (exit ${code})`)
  console.log(`=== bench/${file}: ${code === 0 ? 'done' : `exit ${code}`} in ${seconds}s ===`)
}
if (failed.length) {
  console.error(`\nbench: ${failed.length} failed: ${failed.join(', ')}`)
  process.exit(1)
}
