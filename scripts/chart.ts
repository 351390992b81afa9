/** `bun run chart`: writes docs/lifecycle.md from the session machine's definition. */
import { join } from 'node:path'
import { lifecycleDoc } from '../machines/chart'

const path = join(import.meta.dir, '..', 'docs', 'lifecycle.md')
await Bun.write(path, lifecycleDoc())
console.log(`wrote ${path}`)
