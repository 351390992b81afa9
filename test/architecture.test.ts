import { expect, test } from 'bun:test'
import { Glob } from 'bun'
import { readFileSync } from 'node:fs'
import { join, relative, resolve, dirname } from 'node:path'

/**
 * The dependency rule (docs/architecture.md): http → services → {machines, db, sandbox, harness,
 * gateway}; domain is imported by all and imports nothing of ours; machines and sandbox know
 * nothing of the layers around them.
 */
const root = join(import.meta.dir, '..')

const rules: { layer: string; forbidden: string[] }[] = [
  { layer: 'src/domain', forbidden: ['src/http', 'src/services', 'src/db', 'src/gateway', 'src/harness', 'machines', 'sandbox'] },
  { layer: 'machines', forbidden: ['src/http', 'src/services', 'src/db', 'src/gateway', 'src/harness', 'sandbox'] },
  { layer: 'sandbox', forbidden: ['src/http', 'src/services', 'src/db', 'src/gateway', 'src/harness', 'machines'] },
  { layer: 'src/http', forbidden: ['src/db', 'machines', 'sandbox', 'src/gateway', 'src/harness'] },
  { layer: 'src/db', forbidden: ['src/http', 'src/services', 'machines', 'sandbox', 'src/gateway', 'src/harness'] },
  { layer: 'src/gateway', forbidden: ['src/http', 'src/services', 'src/db', 'machines', 'sandbox'] },
  { layer: 'src/harness', forbidden: ['src/http', 'src/services', 'src/db', 'machines', 'sandbox'] },
]

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8')
  const specs = [...text.matchAll(/(?:^|\n)\s*(?:import|export)[^'"]*?from\s+['"]([^'"]+)['"]/g)].map((m) => m[1]!)
  return specs.filter((s) => s.startsWith('.')).map((s) => relative(root, resolve(dirname(file), s)))
}

test('no layer imports a layer it must not know', () => {
  const violations: string[] = []
  for (const { layer, forbidden } of rules) {
    for (const path of new Glob(`${layer}/**/*.ts`).scanSync({ cwd: root })) {
      for (const target of importsOf(join(root, path))) {
        if (forbidden.some((f) => target === f || target.startsWith(`${f}/`))) violations.push(`${path} imports ${target}`)
      }
    }
  }
  expect(violations).toEqual([])
})

test('the rule is checked against real files', () => {
  expect(importsOf(join(root, 'src/services/session-service.ts'))).toContain('machines/session.machine')
})
