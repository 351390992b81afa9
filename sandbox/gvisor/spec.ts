import { CPU_PERIOD_US } from '../cgroup'
import { fullLimits, type ExecOptions, type SandboxLimits } from '../driver'
import type { MaskedPrograms } from '../host-root'
import { innerRelayArgs, listenPattern, RELAY_SOCKET, SANDBOX_RELAY_DIR } from '../relay'
import { runscPath } from './runsc-binary'

/**
 * Pure parts of the gVisor driver: the OCI bundle of a sandbox's long-lived container, and the
 * runsc command lines (exact argv arrays, unit-tested).
 */

export const GVISOR_WORKSPACE = '/workspace'
export const GVISOR_HOME = '/home/agent'
/** Where exec output files live inside the container (the host tails them; see `SPAWNER`). */
export const SANDBOX_IO_DIR = '/run/agentd/io'
/** Written by the container's init once the gateway relay listens. */
export const READY_FILE = 'ready'

/** Flags baked into a sandbox when it boots (run, restore): no network at all, host Unix sockets openable. */
export const BOOT_FLAGS = ['--network=none', '--host-uds=open']

export interface GvisorLayout {
  hostWorkspace: string
  hostHome: string
  readOnlyPaths: string[]
  /** Host folder bound read-only as /etc. */
  etcDir: string
  /** Host programs bound over by an empty file (host-root.ts). */
  masked: MaskedPrograms
  /** Host folder with the relay socket, bound read-only at SANDBOX_RELAY_DIR. */
  relayDir: string
  /** Host folder for exec output files, bound read-write at SANDBOX_IO_DIR. */
  ioDir: string
  /** Top-level directories of the host that are not symlinks into /usr (non-merged-/usr hosts). */
  rootDirs: string[]
  /** Port the relay listens on inside (fixed for the sandbox's life: restored processes keep it). */
  innerPort: number
  socat: string
  /** Host cgroup of the sandbox (runsc creates it and applies the limits). */
  cgroupsPath: string
  limits: SandboxLimits
}

/** What every sandbox of a driver is made with on the host (fixed when the driver starts). */
export interface GvisorHost {
  etcDir: string
  masked: MaskedPrograms
  rootDirs: string[]
  socat: string
  /** The host cgroup of a container id. */
  cgroupsPath: (cid: string) => string
}

/** The layout of one sandbox's current container: its folders, relay, masked programs and cgroup. */
export function gvisorLayout(
  host: GvisorHost,
  sandbox: {
    spec: { hostWorkspace: string; hostHome: string; readOnlyPaths: string[]; limits: SandboxLimits }
    masked: string[]
    relay: { dir: string }
    io: string
    innerPort: number
    cid: string
  },
): GvisorLayout {
  const { spec } = sandbox
  return {
    hostWorkspace: spec.hostWorkspace,
    hostHome: spec.hostHome,
    readOnlyPaths: spec.readOnlyPaths,
    etcDir: host.etcDir,
    masked: { file: host.masked.file, paths: sandbox.masked },
    relayDir: sandbox.relay.dir,
    ioDir: sandbox.io,
    rootDirs: host.rootDirs,
    innerPort: sandbox.innerPort,
    socat: host.socat,
    cgroupsPath: host.cgroupsPath(sandbox.cid),
    limits: fullLimits(spec.limits),
  }
}

/** A tmpfs inside the sandbox (its memory, never the host's disk) with the spawner's FIFO and requests. */
export const SANDBOX_SPAWN_DIR = '/run/agentd/spawn'
/** The spawner's FIFO in SANDBOX_SPAWN_DIR: one request name per line. */
export const SPAWN_FIFO = 'requests'

/**
 * The spawner, run by the container's init for the sandbox's life: for each name read from the
 * FIFO, the process described by the request file of that name (its environment, folder and argv,
 * as `SPAWN_REQUEST` wrote them), with its output in `<io>/<name>.out|.err`, in a session of its own
 * (so a kill reaches its whole group), its pid in `.pid`, its exit code in `.exit` (written
 * atomically). Files survive a checkpoint, pipes to a host process would not. Its processes are
 * the init's descendants, not a `runsc exec`'s: gVisor since 2023 kills every exec-started process
 * (and its children) when it restores a checkpoint, the caller being gone; the init's live on.
 * The FIFO is held open for reading and writing, so the loop never sees an end of file, and bash
 * (its SIGCHLD handler) reaps what the sandbox orphans, as an init must.
 */
export const SPAWNER = [
  'while :; do',
  '  read -r n <&3 || continue',
  '  case "$n" in ""|*[!a-z0-9-]*) continue;; esac',
  '  (',
  // The FIFO is the spawner's alone: no process of the sandbox's inherits it.
  '    exec 3<&-',
  '    p="$__io/$n" q="$__spawn/$n"',
  '    exec </dev/null >"$p.out" 2>/dev/null',
  // bash's own exports (its level, the previous folder) are not the request's.
  '    ( unset -v OLDPWD SHLVL; . "$q" && exec /usr/bin/setsid "$@" ) 2>"$p.err" &',
  '    echo $! > "$p.pid"',
  '    wait $!',
  '    echo $? > "$p.code"',
  '    /bin/mv -f "$p.code" "$p.exit"',
  '    exec /bin/rm -f "$q"',
  '  ) &',
  'done',
].join('\n')

/**
 * What `runsc exec` runs for each process: a request to the spawner (SPAWNER), its own
 * environment, folder and argv written as bash re-reads them (`declare -px`, `printf %q`) to a file
 * only root reads inside the sandbox, then its name to the FIFO; it ends at once. A container
 * started before the spawner existed (taken over live, or restored from an older checkpoint) has
 * no FIFO: there the process runs as this exec's own child, as it did then.
 */
export const SPAWN_REQUEST = [
  'n=$1 __spawn=$2 __io=$3; shift 3',
  `if [ -p "$__spawn/${SPAWN_FIFO}" ]; then`,
  '  umask 077; unset -v OLDPWD SHLVL',
  '  { declare -px; printf \'cd -- %q || exit 126\\nset --\' "$PWD"; printf \' %q\' "$@"; echo; } > "$__spawn/$n" || exit 126',
  `  echo "$n" > "$__spawn/${SPAWN_FIFO}" || exit 126`,
  '  exit 0',
  'fi',
  'p="$__io/$n"',
  'exec </dev/null >"$p.out" 2>/dev/null',
  '/usr/bin/setsid "$@" 2>"$p.err" &',
  'echo $! > "$p.pid"',
  'wait $!',
  'echo $? > "$p.code"',
  'exec /bin/mv -f "$p.code" "$p.exit"',
].join('\n')

/**
 * The container's init (bash): the gateway relay on the sandbox's loopback, the spawner's FIFO, a
 * ready marker once the relay listens, then the spawner for the sandbox's life.
 */
export function gvisorInit(layout: Pick<GvisorLayout, 'innerPort' | 'socat'>): string[] {
  const relay = innerRelayArgs(layout.socat, layout.innerPort, `${SANDBOX_RELAY_DIR}/${RELAY_SOCKET}`)
  const script = [
    '"$@" </dev/null >/dev/null 2>&1 &',
    `/usr/bin/mkfifo -m 600 "$__spawn/${SPAWN_FIFO}" && exec 3<>"$__spawn/${SPAWN_FIFO}" || /bin/rm -f "$__spawn/${SPAWN_FIFO}"`,
    'while :; do',
    '  while read -r l; do case "$l" in *"$P"*) break 2;; esac; done < /proc/net/tcp',
    '  sleep 0.005',
    'done',
    ': > "$__io/ready"',
    // Without its FIFO (requests then start their process themselves) the init only reaps.
    `[ -p "$__spawn/${SPAWN_FIFO}" ] || while :; do sleep 3600 & wait; done`,
    SPAWNER,
  ].join('\n')
  return [
    '/bin/bash',
    '-c',
    `P='${listenPattern(layout.innerPort)}' __io=${SANDBOX_IO_DIR} __spawn=${SANDBOX_SPAWN_DIR}\n${script}`,
    'agentd-init',
    ...relay,
  ]
}

/** The OCI runtime spec (config.json) of a sandbox's container; `rootfs` is an empty folder beside it. */
export function gvisorSpec(layout: GvisorLayout): Record<string, unknown> {
  const ro = (source: string, destination = source) => ({ destination, type: 'bind', source, options: ['rbind', 'ro'] })
  const rw = (source: string, destination: string) => ({ destination, type: 'bind', source, options: ['rbind', 'rw'] })
  return {
    ociVersion: '1.0.0',
    process: {
      terminal: false,
      user: { uid: 0, gid: 0 },
      args: gvisorInit(layout),
      env: ['PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin'],
      cwd: '/',
      // gVisor enforces the process limit itself (every process runs as uid 0, so it is sandbox-wide).
      rlimits: [{ type: 'RLIMIT_NPROC', hard: layout.limits.maxProcesses, soft: layout.limits.maxProcesses }],
    },
    root: { path: 'rootfs', readonly: true },
    hostname: 'sandbox',
    mounts: [
      { destination: '/proc', type: 'proc', source: 'proc' },
      { destination: '/dev', type: 'tmpfs', source: 'tmpfs' },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs' },
      { destination: SANDBOX_SPAWN_DIR, type: 'tmpfs', source: 'tmpfs', options: ['mode=700'] },
      ro('/usr'),
      ...layout.masked.paths.map((path) => ({ destination: path, type: 'bind', source: layout.masked.file, options: ['bind', 'ro'] })),
      ...layout.rootDirs.map((dir) => ro(dir)),
      ro(layout.etcDir, '/etc'),
      ...layout.readOnlyPaths.map((path) => ro(path)),
      rw(layout.hostHome, GVISOR_HOME),
      rw(layout.hostWorkspace, GVISOR_WORKSPACE),
      ro(layout.relayDir, SANDBOX_RELAY_DIR),
      rw(layout.ioDir, SANDBOX_IO_DIR),
    ],
    linux: {
      namespaces: [{ type: 'pid' }, { type: 'network' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }],
      cgroupsPath: layout.cgroupsPath,
      // On the host, the sandbox's own threads (one per sandboxed thread, plus the sentry's) are
      // only bounded as a backstop: reaching it stops the whole sandbox.
      // The CPU quota (when the limits name one) is on the sentry, which runs every sandboxed thread.
      resources: {
        memory: { limit: layout.limits.memoryBytes },
        pids: { limit: hostTaskLimit(layout.limits.maxProcesses) },
        ...(layout.limits.cpus
          ? { cpu: { quota: Math.max(1000, Math.round(layout.limits.cpus * CPU_PERIOD_US)), period: CPU_PERIOD_US } }
          : {}),
      },
    },
  }
}

/** The host task limit of a sandbox allowed `maxProcesses` tasks inside. */
export function hostTaskLimit(maxProcesses: number): number {
  return maxProcesses * 16 + 512
}

/** A container id: the sandbox's name and a fixed-width generation (runsc matches ids by prefix). */
export function containerId(name: string, generation: number): string {
  return `${name}.${String(generation).padStart(6, '0')}`
}

/** The sandbox name of a container id, or null for a container that is not one of ours. */
export function sandboxNameOf(cid: string): string | null {
  const match = /^(.+)\.(\d{6})$/.exec(cid)
  return match ? match[1]! : null
}

/** `runsc --root=<root> <args…>`, with the runsc agentd runs (runsc-binary.ts). */
export function runscArgs(root: string, ...args: string[]): string[] {
  return [runscPath(), `--root=${root}`, ...args]
}

/** The PATH of an exec whose environment names none (the container's own, as `runsc exec --env` merged it). */
const EXEC_PATH = 'PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin'

/**
 * The OCI process of one exec: a request (SPAWN_REQUEST) that the spawner start `argv`, with
 * output files under `<SANDBOX_IO_DIR>/<name>`. It goes to runsc in a file (`gvisorExecArgs`), never on its command
 * line: the environment holds the turn's gateway token, and any host user can read any process's
 * argv in /proc.
 */
export function gvisorExecProcess(name: string, argv: string[], options: ExecOptions): Record<string, unknown> {
  const env = new Map([['PATH', EXEC_PATH.slice(5)], ...Object.entries(options.env)])
  return {
    terminal: false,
    user: { uid: 0, gid: 0 },
    args: ['/bin/bash', '-c', SPAWN_REQUEST, 'agentd-exec', name, SANDBOX_SPAWN_DIR, SANDBOX_IO_DIR, ...argv],
    env: [...env].map(([key, value]) => `${key}=${value}`),
    cwd: options.cwd ?? GVISOR_WORKSPACE,
  }
}

/** `runsc exec` of the process in `processFile` (gvisorExecProcess, written 0600 where only root reads). */
export function gvisorExecArgs(root: string, containerId: string, processFile: string): string[] {
  return runscArgs(root, 'exec', '--process', processFile, containerId)
}

/** `runsc exec` that signals the process group of an exec'd command (the shell's kill: procps' one misparses there). */
export function gvisorKillArgs(root: string, containerId: string, groupId: number, signal: string): string[] {
  return runscArgs(
    root,
    'exec',
    containerId,
    '/bin/sh',
    '-c',
    'kill -s "$1" -- "-$2"',
    'agentd-kill',
    signal.replace(/^SIG/, ''),
    String(groupId),
  )
}

/**
 * TCP sockets in `/proc/net/tcp{,6}` text that a checkpoint cannot save: anything connected or
 * half-closed (gVisor of 2022 refuses endpoints with waiters). Listeners and closed ones are fine.
 */
export function unsavableSockets(procNetTcp: string): string[] {
  const fine = new Set(['0A', '06', '07']) // LISTEN, TIME_WAIT, CLOSE
  return procNetTcp
    .split('\n')
    .map((line) => line.trim().split(/\s+/))
    .filter((cols) => /^\d+:$/.test(cols[0] ?? '') && cols[3] && !fine.has(cols[3]))
    .map((cols) => `${cols[1]} -> ${cols[2]} (state ${cols[3]})`)
}
