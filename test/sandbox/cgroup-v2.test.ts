import { afterEach, beforeEach, expect, test } from 'bun:test'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, unlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { cgroupVersion, cgroupWrapArgs, delegateControllers, listSandboxCgroups, SandboxCgroup, type CgroupFs } from '../../sandbox/cgroup'
import { alive, waitFor } from './helpers'

/**
 * The cgroup v2 code path, against a fake cgroupfs (this host mounts v1; a v2 host runs the same
 * real sessions in test/security/limits.test.ts). The fake is a folder with the files the kernel
 * would show; its `rmdir` does what the kernel's does: refuses a cgroup with a live process in it,
 * and otherwise removes the cgroup with its interface files.
 */

let root: string
/** What cgroup.kill held when the fake kernel removed the cgroup. */
let killWritten: string | null = null
const kernelRmdir: CgroupFs = {
  rmdir(path) {
    killWritten = existsSync(join(path, 'cgroup.kill')) ? readFileSync(join(path, 'cgroup.kill'), 'utf8') : null
    const procs = readFileSync(join(path, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number)
    if (procs.some((pid) => existsSync(`/proc/${pid}`))) throw Object.assign(new Error(`EBUSY: rmdir ${path}`), { code: 'EBUSY' })
    for (const entry of readdirSync(path, { withFileTypes: true })) if (entry.isFile()) unlinkSync(join(path, entry.name))
    rmdirSync(path)
  },
}

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'agentd-cgv2-'))
  writeFileSync(join(root, 'cgroup.controllers'), 'cpuset cpu io memory hugetlb pids rdma misc\n')
  writeFileSync(join(root, 'cgroup.subtree_control'), '')
  writeFileSync(join(root, 'cgroup.procs'), '1\n')
})
afterEach(() => rmSync(root, { recursive: true, force: true }))

const read = (...path: string[]) => readFileSync(join(root, ...path), 'utf8').trim()
const limits = { memoryBytes: 256 * 1024 * 1024, maxProcesses: 64, cpus: 1.5 }

/** A fresh v2 cgroup `agentd/s1/<id>` in the fake tree, as a driver makes one. */
function made(id = 'sbx-1'): SandboxCgroup {
  const cgroup = SandboxCgroup.for('agentd/s1', id, root, undefined, kernelRmdir)
  cgroup.create(limits)
  // What the kernel shows in a new cgroup before anything joins.
  writeFileSync(join(root, cgroup.path, 'cgroup.procs'), '')
  writeFileSync(join(root, cgroup.path, 'cgroup.events'), 'populated 0\nfrozen 0\n')
  return cgroup
}

test('a tree with cgroup.controllers offering memory and pids is v2; without them it is not usable', () => {
  expect(cgroupVersion(root)).toBe('v2')
  writeFileSync(join(root, 'cgroup.controllers'), 'cpu io\n')
  expect(cgroupVersion(root)).toBeNull()
})

test('create delegates memory, pids and cpu down from the root and writes the limits into one directory', () => {
  const cgroup = made()
  expect(cgroup.version).toBe('v2')
  for (const dir of [[], ['agentd'], ['agentd', 's1']]) expect(read(...dir, 'cgroup.subtree_control')).toBe('+memory +pids +cpu')
  const dir = ['agentd', 's1', 'sbx-1']
  expect(read(...dir, 'memory.max')).toBe(String(256 * 1024 * 1024))
  expect(read(...dir, 'memory.swap.max')).toBe('0')
  expect(read(...dir, 'pids.max')).toBe('64')
  expect(read(...dir, 'cpu.max')).toBe('150000 100000')
  expect(read(...dir, 'cgroup.freeze')).toBe('0')
  expect(cgroup.procsFiles()).toEqual([join(root, 'agentd', 's1', 'sbx-1', 'cgroup.procs')])
  expect(cgroup.joinFiles()).toEqual({ files: cgroup.procsFiles(), writes: 'own pid' })
  expect(listSandboxCgroups('agentd/s1', root)).toEqual(['sbx-1'])
})

test('a controller already delegated is not written again; without cpu offered, no cpu.max', () => {
  writeFileSync(join(root, 'cgroup.controllers'), 'memory pids\n')
  writeFileSync(join(root, 'cgroup.subtree_control'), 'memory pids\n')
  made()
  expect(read('cgroup.subtree_control')).toBe('memory pids')
  expect(read('agentd', 'cgroup.subtree_control')).toBe('+memory +pids')
  expect(existsSync(join(root, 'agentd', 's1', 'sbx-1', 'cpu.max'))).toBe(false)
})

test('a process joins by the one cgroup.procs file from its first instruction', async () => {
  const cgroup = made()
  const child = Bun.spawn(cgroupWrapArgs(cgroup.joinFiles(), ['/bin/sh', '-c', 'echo $$']), { stdout: 'pipe' })
  const pid = Number((await new Response(child.stdout).text()).trim())
  expect(await child.exited).toBe(0)
  expect(read('agentd', 's1', 'sbx-1', 'cgroup.procs')).toBe(String(pid))
})

test('freeze writes cgroup.freeze and waits for the kernel to report frozen; thaw writes it back', async () => {
  const cgroup = made()
  let done = false
  const freezing = cgroup.freeze(30_000).then(() => (done = true))
  expect(read('agentd', 's1', 'sbx-1', 'cgroup.freeze')).toBe('1')
  expect(cgroup.frozen()).toBe(true)
  await Bun.sleep(30)
  expect(done).toBe(false) // asked, not yet reported
  writeFileSync(join(root, 'agentd', 's1', 'sbx-1', 'cgroup.events'), 'populated 1\nfrozen 1\n')
  await freezing
  cgroup.thaw()
  expect(read('agentd', 's1', 'sbx-1', 'cgroup.freeze')).toBe('0')
  expect(cgroup.frozen()).toBe(false)
})

test('a freeze the kernel never reports fails and thaws again', async () => {
  const cgroup = made()
  await expect(cgroup.freeze(50)).rejects.toThrow('did not freeze within 50 ms')
  expect(read('agentd', 's1', 'sbx-1', 'cgroup.freeze')).toBe('0')
})

test('stats read anon + shmem of memory.stat and oom_kill of memory.events', () => {
  const cgroup = made()
  writeFileSync(join(root, 'agentd', 's1', 'sbx-1', 'memory.stat'), 'anon 4096\nfile 999999\nkernel 77\nshmem 1024\n')
  writeFileSync(join(root, 'agentd', 's1', 'sbx-1', 'memory.events'), 'low 0\nhigh 0\nmax 9\noom 3\noom_kill 2\noom_group_kill 0\n')
  expect(cgroup.stats()).toEqual({ memoryBytes: 5120, processes: 0, oomKills: 2 })
})

test('remove kills what is inside (cgroup.kill, and each process), then removes the cgroup but not its parents', async () => {
  const cgroup = made()
  writeFileSync(join(root, cgroup.path, 'cgroup.kill'), '')
  const child = Bun.spawn(cgroupWrapArgs(cgroup.joinFiles(), ['sleep', '600']), { stdout: 'ignore' })
  await waitFor('the process to join', () => read('agentd', 's1', 'sbx-1', 'cgroup.procs') === String(child.pid), 30_000)
  expect(cgroup.pids()).toEqual([child.pid])
  await cgroup.remove()
  expect(alive(child.pid)).toBe(false)
  expect(await child.exited).not.toBe(0)
  expect(killWritten).toBe('1')
  expect(existsSync(join(root, 'agentd', 's1', 'sbx-1'))).toBe(false)
  expect(existsSync(join(root, 'agentd', 's1'))).toBe(true)
  expect(listSandboxCgroups('agentd/s1', root)).toEqual([])
})

test('the fake kernel refuses to remove a cgroup with a live process (so remove must kill first)', () => {
  const cgroup = made('sbx-2')
  writeFileSync(join(root, cgroup.path, 'cgroup.procs'), `${process.pid}\n`)
  expect(() => kernelRmdir.rmdir(join(root, cgroup.path))).toThrow('EBUSY')
})

test('delegateControllers makes the parent runsc puts its containers in and delegates down to it (a no-op on v1)', () => {
  expect(delegateControllers('agentd/s9', root)).toBe(true)
  for (const dir of [[], ['agentd'], ['agentd', 's9']]) expect(read(...dir, 'cgroup.subtree_control')).toBe('+memory +pids +cpu')
  const v1 = mkdtempSync(join(tmpdir(), 'agentd-cgv1-'))
  try {
    expect(delegateControllers('agentd/s9', v1)).toBe(false)
    expect(existsSync(join(v1, 'agentd'))).toBe(false)
  } finally {
    rmSync(v1, { recursive: true, force: true })
  }
})
