import { expect, test } from 'bun:test'
import { chmodSync, existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { defaultRunRoot } from '../../sandbox/relay'
import { binaryIdentity } from '../../sandbox/gvisor/runsc'
import { BUILT_RUNSC } from '../../sandbox/gvisor/runsc-binary'
import { hostSandboxSkipReason } from './helpers'

const remembered = join(defaultRunRoot(), 'runsc-works')

/** gvisorWorks() in a fresh process told to run `bin/runsc` (AGENTD_RUNSC). */
async function worksWith(bin: string): Promise<string> {
  const file = JSON.stringify(join(import.meta.dir, '../../sandbox/gvisor/runsc'))
  const code = `import { gvisorWorks } from ${file}; console.log(gvisorWorks())`
  const child = Bun.spawn([process.execPath, '-e', code], { env: { ...process.env, AGENTD_RUNSC: join(bin, 'runsc') }, stdout: 'pipe' })
  return (await new Response(child.stdout).text()).trim()
}

test.skipIf(hostSandboxSkipReason() !== null)(
  'a passed runsc probe is remembered for this boot and binary; another binary is probed',
  async () => {
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
  },
)

/** runscBinary() in a fresh process (it is decided once per process) with `env` added. */
async function binaryWith(
  env: Record<string, string>,
): Promise<{ path: string; version: string; source: string; platform: string } | null> {
  const file = JSON.stringify(join(import.meta.dir, '../../sandbox/gvisor/runsc-binary'))
  const code = `import { runscBinary } from ${file}; console.log(JSON.stringify(runscBinary()))`
  const child = Bun.spawn([process.execPath, '-e', code], { env: { ...process.env, ...env }, stdout: 'pipe' })
  return JSON.parse((await new Response(child.stdout).text()).trim())
}

test('which runsc: AGENTD_RUNSC names it, else a build of ours, else the one on PATH; its version and platform are said', async () => {
  const bin = mkdtempSync(join(tmpdir(), 'agentd-fake-runsc-'))
  try {
    // Debian's build of 2022 and gVisor's module builds say their dates differently; before 2023 the default platform was ptrace.
    writeFileSync(join(bin, 'old'), '#!/bin/sh\necho "runsc version 0.0~20221219.0"\necho "spec: 1.0.2-dev"\n')
    writeFileSync(join(bin, 'new'), '#!/bin/sh\necho "runsc version release-20260901.0"\n')
    writeFileSync(join(bin, 'runsc'), '#!/bin/sh\necho "runsc version 0.0~20221219.0"\n')
    for (const name of ['old', 'new', 'runsc']) chmodSync(join(bin, name), 0o755)
    expect(await binaryWith({ AGENTD_RUNSC: join(bin, 'old') })).toEqual({
      path: join(bin, 'old'),
      version: '0.0~20221219.0',
      source: 'AGENTD_RUNSC',
      platform: 'ptrace',
    })
    expect(await binaryWith({ AGENTD_RUNSC: join(bin, 'new') })).toMatchObject({ version: 'release-20260901.0', platform: 'systrap' })
    // Else a build of ours (scripts/system-deps.sh makes one where Go is installed), else the first on PATH.
    const found = await binaryWith({ PATH: `${bin}:${process.env.PATH}`, AGENTD_RUNSC: '' })
    if (existsSync(BUILT_RUNSC))
      expect(found).toMatchObject({ path: realpathSync(BUILT_RUNSC), source: 'gvisor.dev/gvisor module', platform: 'systrap' })
    else expect(found).toEqual({ path: join(bin, 'runsc'), version: '0.0~20221219.0', source: 'PATH', platform: 'ptrace' })
  } finally {
    rmSync(bin, { recursive: true, force: true })
  }
})
