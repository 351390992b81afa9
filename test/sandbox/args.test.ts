import { expect, test } from 'bun:test'
import { knownMasks } from '../../sandbox/host-root'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { bwrapArgs } from '../../sandbox/bwrap/driver'
import { canPlaceThread, nsenterArgs, placedArgs, spawnPlaced } from '../../sandbox/spawn-in'
import { netHolderArgs } from '../../sandbox/bwrap/netns'
import { cgroupName, cgroupWrapArgs } from '../../sandbox/cgroup'
import {
  containerId,
  SPAWN_FIFO,
  SPAWN_REQUEST,
  SPAWNER,
  gvisorExecArgs,
  gvisorExecProcess,
  gvisorInit,
  gvisorKillArgs,
  gvisorSpec,
  hostTaskLimit,
  sandboxNameOf,
  unsavableSockets,
} from '../../sandbox/gvisor/spec'
import { innerRelayArgs, listenPattern, relayDir } from '../../sandbox/relay'
import { runscPath } from '../../sandbox/gvisor/runsc-binary'

/** The argv builders are pure: exact command lines, no shell strings. */

test('bwrapArgs: all namespaces but the network, no capabilities, read-only system, cleared env', () => {
  const layout = {
    hostWorkspace: '/data/s1/workspace',
    hostHome: '/data/s1/home',
    readOnlyPaths: ['/app/node_modules'],
    etcDir: '/run/agentd/default/etc',
    root: {
      links: [
        { path: '/bin', target: 'usr/bin' },
        { path: '/lib64', target: 'usr/lib64' },
      ],
      dirs: ['/lib32'],
    },
    masked: { file: '/run/agentd/default/masked-program', paths: ['/usr/bin/lsb_release'] },
  }
  expect(bwrapArgs(layout, ['claude', '-p', '--', 'hello world'], { env: { HOME: '/home/agent', A: 'b c' } })).toEqual([
    'bwrap',
    '--unshare-all',
    '--share-net',
    '--die-with-parent',
    '--new-session',
    '--cap-drop',
    'ALL',
    '--hostname',
    'sandbox',
    '--ro-bind',
    '/usr',
    '/usr',
    '--ro-bind',
    '/run/agentd/default/masked-program',
    '/usr/bin/lsb_release',
    '--symlink',
    'usr/bin',
    '/bin',
    '--symlink',
    'usr/lib64',
    '/lib64',
    '--ro-bind',
    '/lib32',
    '/lib32',
    '--ro-bind',
    '/run/agentd/default/etc',
    '/etc',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    '--tmpfs',
    '/tmp',
    '--ro-bind',
    '/app/node_modules',
    '/app/node_modules',
    '--bind',
    '/data/s1/home',
    '/home/agent',
    '--bind',
    '/data/s1/workspace',
    '/workspace',
    '--chdir',
    '/workspace',
    '--clearenv',
    '--setenv',
    'HOME',
    '/home/agent',
    '--setenv',
    'A',
    'b c',
    '--',
    'claude',
    '-p',
    '--',
    'hello world',
  ])
  expect(bwrapArgs(layout, ['pwd'], { env: {}, cwd: '/workspace/sub' })).toContain('/workspace/sub')
})

test('nsenterArgs enters only the network namespace of the holder', () => {
  expect(nsenterArgs(4242, ['bwrap', 'x'])).toEqual(['nsenter', '--net=/proc/4242/ns/net', '--', 'bwrap', 'x'])
  // What runs where agentd's thread cannot take the namespace and niceness itself (not root).
  expect(placedArgs(['bwrap', 'x'], { netPid: 4242, niced: true })).toEqual([
    'nice',
    '-n',
    '10',
    'nsenter',
    '--net=/proc/4242/ns/net',
    '--',
    'bwrap',
    'x',
  ])
})

test('netHolderArgs: bwrap unsharing only the network, running the relay', () => {
  expect(netHolderArgs('/usr/bin/socat', 8787, '/run/agentd/default/relay/abc/gateway.sock')).toEqual([
    'bwrap',
    '--unshare-net',
    '--dev-bind',
    '/',
    '/',
    '--die-with-parent',
    '--',
    '/usr/bin/socat',
    '-t',
    '0.1',
    'TCP-LISTEN:8787,bind=127.0.0.1,reuseaddr,fork,max-children=64',
    'UNIX-CONNECT:/run/agentd/default/relay/abc/gateway.sock',
  ])
})

test('innerRelayArgs: socat on loopback, one relay-socket connection per request', () => {
  expect(innerRelayArgs('socat', 80, '/run/agentd/relay/gateway.sock')).toEqual([
    'socat',
    '-t',
    '0.1',
    'TCP-LISTEN:80,bind=127.0.0.1,reuseaddr,fork,max-children=64',
    'UNIX-CONNECT:/run/agentd/relay/gateway.sock',
  ])
})

test('listenPattern matches /proc/net/tcp for a listener on 127.0.0.1', () => {
  expect(listenPattern(8787)).toBe('0100007F:2253 00000000:0000 0A')
  expect(listenPattern(80)).toBe('0100007F:0050 00000000:0000 0A')
})

test('cgroupWrapArgs: a sh that joins each cgroup in order, then execs', () => {
  const argv = cgroupWrapArgs({ files: ['/cg/pids/a/tasks', '/cg/freezer/a/tasks'], writes: 'own thread' }, ['bwrap', '--', 'x y'])
  expect(argv).toEqual([
    '/bin/sh',
    '-c',
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo 0 > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"',
    'agentd-cgroup',
    '2',
    '/cg/pids/a/tasks',
    '/cg/freezer/a/tasks',
    'bwrap',
    '--',
    'x y',
  ])
  expect(cgroupWrapArgs({ files: ['/cg/a/cgroup.procs'], writes: 'own pid' }, ['true'])[2]).toContain('echo $$ > "$1"')
})

test('cgroupWrapArgs really joins and execs (files stand in for tasks and cgroup.procs)', async () => {
  await using scratch = scratchDir('agentd-cgwrap-')
  const dir = scratch.path
  await Bun.write(`${dir}/a`, '')
  await Bun.write(`${dir}/b`, '')
  await Bun.write(`${dir}/c`, '')
  const child = Bun.spawn(
    cgroupWrapArgs({ files: [`${dir}/a`, `${dir}/b`], writes: 'own thread' }, ['/bin/sh', '-c', 'echo "$0 $$"', 'args ok']),
    { stdout: 'pipe' },
  )
  const out = await new Response(child.stdout).text()
  expect(out).toBe(`args ok ${child.pid}\n`)
  // 0: the writing thread itself (to the kernel); the file only records what was written.
  expect(await Bun.file(`${dir}/a`).text()).toBe('0\n')
  expect(await Bun.file(`${dir}/b`).text()).toBe('0\n')
  const byPid = Bun.spawn(cgroupWrapArgs({ files: [`${dir}/c`], writes: 'own pid' }, ['true']))
  expect(await byPid.exited).toBe(0)
  expect(await Bun.file(`${dir}/c`).text()).toBe(`${byPid.pid}\n`)
})

test('names: cgroups keep a safe alphabet; relay folders are short and stable', () => {
  expect(cgroupName('3f2a-b_c.d')).toBe('3f2a-b_c.d')
  expect(cgroupName('../etc x')).toBe('___etc_x')
  expect(cgroupName('..')).toBe('__')
  expect(cgroupName('')).toBe('_')
  expect(relayDir('/run/agentd/default/relay', 'sess-1')).toBe(relayDir('/run/agentd/default/relay', 'sess-1'))
  expect(relayDir('/r', 'sess-1')).toMatch(/^\/r\/[0-9a-f]{16}$/)
})

test('gvisorSpec: read-only root and system, writable workspace and home, relay and io folders, limits', () => {
  const spec = gvisorSpec({
    hostWorkspace: '/d/s/workspace',
    hostHome: '/d/s/home',
    readOnlyPaths: ['/app/node_modules'],
    etcDir: '/run/agentd/x/etc',
    masked: { file: '/run/agentd/x/masked-program', paths: ['/usr/bin/lsb_release'] },
    relayDir: '/run/agentd/x/relay/ab',
    ioDir: '/d/s/sandbox/io',
    rootDirs: [],
    innerPort: 8787,
    socat: '/usr/bin/socat',
    cgroupsPath: '/agentd/x/s.000001',
    limits: { memoryBytes: 1 << 30, maxProcesses: 100 },
  })
  expect(spec).toEqual({
    ociVersion: '1.0.0',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: gvisorInit({ innerPort: 8787, socat: '/usr/bin/socat' }),
      env: ['PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin'],
      cwd: '/',
      rlimits: [{ type: 'RLIMIT_NPROC', hard: 100, soft: 100 }],
    },
    root: { path: 'rootfs', readonly: true },
    hostname: 'sandbox',
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs' },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs' },
      { destination: '/run/agentd/spawn', type: 'tmpfs', source: 'tmpfs', options: ['mode=700'] },
      { destination: '/usr', type: 'bind', source: '/usr', options: ['rbind', 'ro'] },
      { destination: '/usr/bin/lsb_release', type: 'bind', source: '/run/agentd/x/masked-program', options: ['bind', 'ro'] },
      { destination: '/etc', type: 'bind', source: '/run/agentd/x/etc', options: ['rbind', 'ro'] },
      { destination: '/app/node_modules', type: 'bind', source: '/app/node_modules', options: ['rbind', 'ro'] },
      { destination: '/home/agent', type: 'bind', source: '/d/s/home', options: ['rbind', 'rw'] },
      { destination: '/workspace', type: 'bind', source: '/d/s/workspace', options: ['rbind', 'rw'] },
      { destination: '/run/agentd/relay', type: 'bind', source: '/run/agentd/x/relay/ab', options: ['rbind', 'ro'] },
      { destination: '/run/agentd/io', type: 'bind', source: '/d/s/sandbox/io', options: ['rbind', 'rw'] },
    ],
    linux: {
      namespaces: [{ type: 'pid' }, { type: 'network' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
      cgroupsPath: '/agentd/x/s.000001',
      resources: { memory: { limit: 1 << 30 }, pids: { limit: hostTaskLimit(100) } },
    },
  })
})

test('gvisorInit: the relay, a ready marker once it listens, then the spawner', () => {
  const [shell, dashC, script, name, ...relay] = gvisorInit({ innerPort: 8787, socat: '/usr/bin/socat' })
  expect([shell, dashC, name]).toEqual(['/bin/bash', '-c', 'agentd-init'])
  expect(relay).toEqual(innerRelayArgs('/usr/bin/socat', 8787, '/run/agentd/relay/gateway.sock'))
  expect(script).toContain(listenPattern(8787))
  expect(script).toContain('__io=/run/agentd/io __spawn=/run/agentd/spawn')
  expect(script).toContain(': > "$__io/ready"')
  expect(script).toContain(SPAWNER)
})

test('gvisorExecArgs: runsc exec of a process file (environment and argv never on the command line)', () => {
  expect(gvisorExecArgs('/run/agentd/x/runsc', 's.000002', '/state/exec/k1.json')).toEqual([
    runscPath(),
    '--root=/run/agentd/x/runsc',
    'exec',
    '--process',
    '/state/exec/k1.json',
    's.000002',
  ])
  expect(gvisorExecProcess('k1', ['claude', '-p'], { env: { HOME: '/home/agent', PATH: '/x' }, cwd: '/workspace/a' })).toEqual({
    terminal: false,
    user: { uid: 0, gid: 0 },
    args: ['/bin/bash', '-c', SPAWN_REQUEST, 'agentd-exec', 'k1', '/run/agentd/spawn', '/run/agentd/io', 'claude', '-p'],
    env: ['PATH=/x', 'HOME=/home/agent'],
    cwd: '/workspace/a',
  })
  expect(gvisorExecProcess('k2', ['true'], { env: {} }).env).toEqual(['PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin'])
  expect(gvisorKillArgs('/r', 's.000002', 12, 'SIGTERM')).toEqual([
    runscPath(),
    '--root=/r',
    'exec',
    's.000002',
    '/bin/sh',
    '-c',
    'kill -s "$1" -- "-$2"',
    'agentd-kill',
    'TERM',
    '12',
  ])
})

/** Runs the spawner on this host (bash, as in the sandbox) over `spawn` and `io` until the test ends. */
function hostSpawner(spawn: string, io: string) {
  const script = `__io=$1 __spawn=$2; /usr/bin/mkfifo -m 600 "$__spawn/${SPAWN_FIFO}"; exec 3<>"$__spawn/${SPAWN_FIFO}"\n${SPAWNER}`
  // The container's init has only PATH in its environment (gvisorSpec).
  const env = { PATH: '/usr/local/bin:/usr/bin:/bin' }
  return Bun.spawn(['/bin/bash', '-c', script, 'agentd-init', io, spawn], { env, stdout: 'ignore', stderr: 'ignore' })
}

async function until(check: () => boolean): Promise<void> {
  for (let tries = 0; !check(); tries++) {
    if (tries > 500) throw new Error('gave up waiting')
    await Bun.sleep(10)
  }
}

test('SPAWN_REQUEST and SPAWNER: the spawner starts the process with the environment, folder and argv of the request (bash, here)', async () => {
  await using scratch = scratchDir('agentd-spawn-')
  const [spawn, io, cwd] = ['spawn', 'io', "a dir 'quoted'"].map((name) => join(scratch.path, name))
  for (const dir of [spawn!, io!, cwd!]) mkdirSync(dir)
  const spawner = hostSpawner(spawn!, io!)
  try {
    await until(() => existsSync(join(spawn!, SPAWN_FIFO)))
    const tricky = `x 'y' "z" $HOME \\ \`id\`\nsecond line`
    const argv = ['/bin/sh', '-c', 'printf "%s|" "$A" "$0" "$1" "$(pwd)" "$B"; echo err >&2; exit 5', 'arg $0 *', '']
    const request = Bun.spawn(['/bin/bash', '-c', SPAWN_REQUEST, 'agentd-exec', 'k1-0', spawn!, io!, ...argv], {
      env: { A: tricky, B: '', PATH: '/usr/bin:/bin' },
      cwd,
    })
    expect(await request.exited).toBe(0)
    await until(() => existsSync(join(io!, 'k1-0.exit')))
    expect(readFileSync(join(io!, 'k1-0.out'), 'utf8')).toBe(`${tricky}|arg $0 *||${cwd}||`)
    expect(readFileSync(join(io!, 'k1-0.err'), 'utf8')).toBe('err\n')
    expect(readFileSync(join(io!, 'k1-0.exit'), 'utf8')).toBe('5\n')
    const pid = Number(readFileSync(join(io!, 'k1-0.pid'), 'utf8'))
    expect(pid).toBeGreaterThan(0)
    // The process was the spawner's (its session leader), not the request's; its request file is gone.
    await until(() => !existsSync(join(spawn!, 'k1-0')))
    // A name that is not one of the driver's is ignored; the spawner goes on.
    writeFileSync(join(spawn!, SPAWN_FIFO), '../evil\n')
    // The spawner's FIFO is not among the process's open files.
    const fd3 = 'readlink /proc/$$/fd/3 || echo none'
    const fds = Bun.spawn(['/bin/bash', '-c', SPAWN_REQUEST, 'agentd-exec', 'k1-2', spawn!, io!, '/bin/sh', '-c', fd3], { cwd })
    expect(await fds.exited).toBe(0)
    await until(() => existsSync(join(io!, 'k1-2.exit')))
    expect(readFileSync(join(io!, 'k1-2.out'), 'utf8')).toBe('none\n')
    // The environment is the request's, nothing of bash's or the spawner's added.
    const names = 'env | cut -d= -f1 | sort | tr "\\n" " "'
    const next = Bun.spawn(['/bin/bash', '-c', SPAWN_REQUEST, 'agentd-exec', 'k1-1', spawn!, io!, '/bin/sh', '-c', names], {
      env: { C: '1', PATH: '/usr/bin:/bin' },
      cwd,
    })
    expect(await next.exited).toBe(0)
    await until(() => existsSync(join(io!, 'k1-1.exit')))
    expect(readFileSync(join(io!, 'k1-1.out'), 'utf8')).toBe('C PATH PWD ')
    expect(existsSync(join(io!, '../evil.pid'))).toBe(false)
  } finally {
    spawner.kill('SIGKILL')
  }
})

test('SPAWN_REQUEST without a spawner (a container from before it) runs the process as its own child', async () => {
  await using scratch = scratchDir('agentd-spawn-')
  const request = Bun.spawn(
    ['/bin/bash', '-c', SPAWN_REQUEST, 'agentd-exec', 'p', scratch.path, scratch.path, '/bin/sh', '-c', 'echo out; echo err >&2; exit 5'],
    { env: { PATH: '/usr/bin:/bin' } },
  )
  await request.exited
  expect(await Bun.file(`${scratch.path}/p.out`).text()).toBe('out\n')
  expect(await Bun.file(`${scratch.path}/p.err`).text()).toBe('err\n')
  expect(await Bun.file(`${scratch.path}/p.exit`).text()).toBe('5\n')
  expect(Number(await Bun.file(`${scratch.path}/p.pid`).text())).toBeGreaterThan(0)
})

test('unsavableSockets: connected or closing TCP sockets, not listeners or TIME_WAIT', () => {
  const text = [
    '  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode',
    '   2: 0100007F:2253 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3',
    '   3: 0100007F:1B58 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 4',
    '   4: 0100007F:1B58 0100007F:A1B3 06 00000000:00000000 00:00000000 00000000     0        0 5',
    '   5: 0100007F:1B58 0100007F:A1B4 08 00000000:00000000 00:00000000 00000000     0        0 6',
  ].join('\n')
  expect(unsavableSockets(text)).toEqual(['0100007F:1B58 -> 0100007F:A1B2 (state 01)', '0100007F:1B58 -> 0100007F:A1B4 (state 08)'])
  expect(unsavableSockets('')).toEqual([])
})

test('container ids: a fixed-width generation, so no id is a prefix of another', () => {
  expect(containerId('3f2a', 7)).toBe('3f2a.000007')
  expect(sandboxNameOf('3f2a.000007')).toBe('3f2a')
  expect(sandboxNameOf('3f2a.b.000012')).toBe('3f2a.b')
  expect(sandboxNameOf('someone-elses')).toBeNull()
})

/** A temp folder removed when the test's `await using` scope ends. */
function scratchDir(prefix: string) {
  const path = mkdtempSync(join(tmpdir(), prefix))
  return { path, [Symbol.asyncDispose]: async () => rmSync(path, { recursive: true, force: true }) }
}

test('spawnPlaced never enters a network namespace that is not the one named (a holder pid reused), and leaves the thread as it was', () => {
  const own = readlinkSync(`/proc/${process.pid}/task/${process.pid}/ns/net`)
  let spawned = false
  const start = () => {
    spawned = true
  }
  // The pid is this process's own, whose namespace is not the one the sandbox was made with.
  expect(() => spawnPlaced(['true'], { netPid: process.pid, netns: 'net:[1]', niced: true }, start)).toThrow(
    /no longer in the sandbox's network namespace/,
  )
  expect(spawned).toBe(false)
  expect(readlinkSync(`/proc/${process.pid}/task/${process.pid}/ns/net`)).toBe(own)
  expect(readFileSync(`/proc/${process.pid}/task/${process.pid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]).toBe('0') // niceness
})

test('canPlaceThread: only with both CAP_SYS_ADMIN and CAP_SYS_NICE (root in a default container has neither)', () => {
  const status = (capEff: string) => `Name:\tagentd\nCapInh:\t0000000000000000\nCapEff:\t${capEff}\nCapBnd:\t000001ffffffffff\n`
  expect(canPlaceThread(status('000001ffffffffff'))).toBe(true) // root with every capability
  expect(canPlaceThread(status('00000000a80425fb'))).toBe(false) // Docker's default set
  expect(canPlaceThread(status('0000000000200000'))).toBe(false) // CAP_SYS_ADMIN alone
  expect(canPlaceThread(status('0000000000a00000'))).toBe(true) // CAP_SYS_ADMIN and CAP_SYS_NICE
  expect(canPlaceThread('Name:\tagentd\n')).toBe(false)
})

test('a sandbox record names only the programs agentd masks: any other path in it is never mounted', () => {
  expect(knownMasks(['/usr/bin/lsb_release', '/etc/shadow', '/'])).toEqual(['/usr/bin/lsb_release'])
  expect(knownMasks(undefined)).toEqual([])
  expect(knownMasks('/usr/bin/lsb_release')).toEqual([])
})
