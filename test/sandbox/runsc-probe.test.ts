import { expect, test } from 'bun:test'
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defaultRunRoot } from '../../sandbox/relay'
import { binaryIdentity } from '../../sandbox/runsc'
import { hostSandboxSkipReason } from './helpers'

const remembered = join(defaultRunRoot(), 'runsc-works')

/** gvisorWorks() in a fresh process whose PATH finds `bin/runsc` first. */
async function worksWith(bin: string): Promise<string> {
  const code = `import { gvisorWorks } from ${JSON.stringify(join(import.meta.dir, '../../sandbox/runsc'))}; console.log(gvisorWorks())`
  const child = Bun.spawn([process.execPath, '-e', code], { env: { ...process.env, PATH: `${bin}:${process.env.PATH}` }, stdout: 'pipe' })
  return (await new Response(child.stdout).text()).trim()
}

test.skipIf(hostSandboxSkipReason() !== null)('a passed runsc probe is remembered for this boot and binary; another binary is probed', async () => {
  const bin = mkdtempSync(join(tmpdir(), 'agentd-fake-runsc-'))
  const before = (() => {
    try {
      return readFileSync(remembered, 'utf8')
    } catch {
      return null
    }
  })()
  try {
    // A runsc that fails every command: probed, it fails, and nothing is remembered.
    writeFileSync(join(bin, 'runsc'), '#!/bin/sh\nexit 1\n')
    chmodSync(join(bin, 'runsc'), 0o755)
    rmSync(remembered, { force: true })
    expect(await worksWith(bin)).toBe('false')
    expect(() => readFileSync(remembered)).toThrow()
    // Remembered as working under its identity: believed without running it.
    writeFileSync(remembered, binaryIdentity(join(bin, 'runsc'))!)
    expect(await worksWith(bin)).toBe('true')
    // The binary replaced (another size and change time): the memory no longer applies.
    writeFileSync(join(bin, 'runsc'), '#!/bin/sh\n# another build\nexit 1\n')
    expect(await worksWith(bin)).toBe('false')
  } finally {
    rmSync(bin, { recursive: true, force: true })
    if (before === null) rmSync(remembered, { force: true })
    else writeFileSync(remembered, before, { mode: 0o600 })
  }
})
