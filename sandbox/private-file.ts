import { closeSync, constants, mkdirSync, openSync, unlinkSync, writeSync } from 'node:fs'
import { join } from 'node:path'

/**
 * Writes `content` to a new file `<stateDir>/exec/<name>`, 0600 in a 0700 folder, created
 * exclusively (an existing file is an error, never overwritten or followed). For what a driver
 * hands a host process that must not be in its argv (the environment of an exec holds the turn's
 * gateway token, and any host user can read any process's /proc/<pid>/cmdline). `stateDir` is the
 * sandbox's host-only folder (SandboxSpec.stateDir): the sandbox never sees it.
 */
export function writePrivateFile(stateDir: string, name: string, content: string): string {
  const dir = join(stateDir, 'exec')
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const path = join(dir, name)
  const fd = openSync(path, 'wx', 0o600)
  try {
    writeSync(fd, content)
  } finally {
    closeSync(fd)
  }
  return path
}

/**
 * Runs a bwrap command line (`bwrapArgs`' output) with its options read from fd 3 (`bwrap --args
 * 3`, NUL-separated): only `bwrap --args 3 -- <command>` stays in argv, and the options (every
 * `--setenv`, among them the gateway token) never are. They are written to a private file that
 * agentd opens and removes at once: the open file reaches bwrap as its fd 3 (the caller passes
 * `fd` to the spawn and closes it after), and nothing of it is on disk while anything runs. bwrap
 * closes fd 3 before the command starts.
 */
export function bwrapOptionsOnFd(bwrapArgv: string[], stateDir: string): { argv: string[]; fd: number } {
  const end = bwrapArgv.indexOf('--')
  if (bwrapArgv[0] !== 'bwrap' || end < 0) throw new Error('bwrapOptionsOnFd: not a bwrap command line with --')
  const options = bwrapArgv.slice(1, end)
  if (options.some((arg) => arg.includes('\0'))) throw new Error('a bwrap option holds a NUL byte')
  const file = writePrivateFile(stateDir, `${crypto.randomUUID()}.args`, options.map((arg) => `${arg}\0`).join(''))
  try {
    // Opened close-on-exec (as Bun opens every file): only the spawn that passes it as fd 3 gives it to a process.
    return { argv: ['bwrap', '--args', '3', ...bwrapArgv.slice(end)], fd: openSync(file, constants.O_RDONLY | constants.O_NOFOLLOW) }
  } finally {
    unlinkSync(file)
  }
}
