import { afterAll, expect, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/**
 * `npm start` on a machine where neither gVisor nor bubblewrap can run (here: a PATH without
 * runsc and bwrap, and AGENTD_RUNSC naming a runsc that is not there) refuses to start instead of running agents as plain host processes, unless the
 * operator asks for `process` by name.
 */

const root = join(import.meta.dir, '..', '..')
const emptyPath = mkdtempSync(join(tmpdir(), 'agentd-nopath-'))
const dataDir = mkdtempSync(join(tmpdir(), 'agentd-noiso-'))
afterAll(() => {
  rmSync(emptyPath, { recursive: true, force: true })
  rmSync(dataDir, { recursive: true, force: true })
})

/** `bun src/main.ts` with no runsc or bwrap on its PATH, and no runsc where AGENTD_RUNSC says (not agentd's own build either). */
function start(env: Record<string, string> = {}) {
  return Bun.spawn([process.execPath, join(root, 'src/main.ts')], {
    cwd: root,
    env: {
      PATH: emptyPath,
      HOME: process.env.HOME ?? '/root',
      PORT: '0',
      DATA_DIR: dataDir,
      AGENTD_RUNSC: join(emptyPath, 'runsc'),
      ...env,
    },
    stdin: 'ignore',
    stdout: 'ignore',
    stderr: 'pipe',
  })
}

test('without an isolating driver and without AGENTD_SANDBOX, agentd exits non-zero saying what to do', async () => {
  const proc = start()
  const timer = setTimeout(() => proc.kill('SIGKILL'), 30_000)
  const [stderr, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited])
  clearTimeout(timer)
  expect(code).toBe(2)
  expect(stderr).toContain('no isolating sandbox driver works on this machine')
  expect(stderr).toContain('runsc (gVisor) is not installed')
  expect(stderr).toContain('bwrap (bubblewrap) is not installed')
  expect(stderr).toContain('set AGENTD_SANDBOX=process')
  expect(stderr).not.toContain('listening on')
  expect(stderr).not.toContain('    at ') // one clear line, no stack
})

test('AGENTD_SANDBOX=process, named by the operator, starts with a loud warning', async () => {
  const proc = start({ AGENTD_SANDBOX: 'process' })
  let stderr = ''
  const decoder = new TextDecoder()
  const deadline = Date.now() + 30_000
  for await (const chunk of proc.stderr) {
    stderr += decoder.decode(chunk, { stream: true })
    if (stderr.includes('listening on') || Date.now() > deadline) break
  }
  proc.kill('SIGTERM')
  await proc.exited
  expect(stderr).toContain('listening on')
  expect(stderr).toContain('WARNING sandbox driver \\"process\\" (AGENTD_SANDBOX=process)') // a JSON log line: its quotes escaped
  expect(stderr).toContain('NO isolation')
})
