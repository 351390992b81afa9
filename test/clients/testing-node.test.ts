import { expect, test } from 'bun:test'
import { join } from 'node:path'

/**
 * The `node --test` suite of agentd/testing (testing-node.mjs) run by Node itself, as a user's CI
 * would: Node imports the package's export (plain JavaScript), which runs agentd under Bun.
 */
test('agentd/testing works from node --test: its suite passes under Node', async () => {
  const node = Bun.which('node')
  expect(node).not.toBeNull()
  const run = Bun.spawn([node!, '--test', join(import.meta.dir, 'testing-node.mjs')], {
    cwd: join(import.meta.dir, '..', '..'),
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const [out, err, code] = await Promise.all([new Response(run.stdout).text(), new Response(run.stderr).text(), run.exited])
  console.log(
    out
      .split('\n')
      .filter((line) => line.includes('ready in'))
      .join('\n'),
  )
  expect({ code, err, out: code === 0 ? '' : out }).toEqual({ code: 0, err: '', out: '' })
  expect(out).toContain('# pass 1')
}, 120_000)
