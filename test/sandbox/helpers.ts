import { mkdtempSync, readFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { SandboxSpec } from '../../sandbox/driver'
import { removeDataDir } from '../helpers/cleanup'
import { poll } from '../helpers/poll'

export { removeScope } from '../helpers/cleanup'

/** A temp folder for a test's sandboxes, removed at dispose. */
export function tempRoot(prefix = 'agentd-sbx-'): { path: string; [Symbol.asyncDispose](): Promise<void> } {
  const path = mkdtempSync(join(tmpdir(), prefix))
  // Disks of sandboxes (and spare disks) may still be mounted below it.
  return { path, [Symbol.asyncDispose]: () => removeDataDir(path) }
}

/** A sandbox spec under `root` for the given id. */
export function specFor(root: string, id: string, gatewayPort: number, overrides: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    id,
    hostWorkspace: join(root, id, 'workspace'),
    hostHome: join(root, id, 'home'),
    stateDir: join(root, id, 'sandbox'),
    readOnlyPaths: [],
    gateway: { host: '127.0.0.1', port: gatewayPort },
    limits: { memoryBytes: 512 * 1024 * 1024, maxProcesses: 256 },
    ...overrides,
  }
}

/** A unique scope, so tests running at once (and other agentds) never touch each other's sandboxes. */
export function testScope(): string {
  return `test-${crypto.randomUUID().slice(0, 8)}`
}

/** Waits for `probe` to give a value (test/helpers/poll.ts), 10 s by default. */
export const waitFor = <T>(
  what: string,
  probe: () => T | null | undefined | false | Promise<T | null | undefined | false>,
  timeoutMs = 10_000,
) => poll(what, probe, { timeoutMs })

/** A fake gateway on the host's loopback, and a second listener that must stay unreachable. */
export function fakeGateway(): { port: number; otherPort: number; [Symbol.dispose](): void } {
  const gateway = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: (req) => new Response(`gateway ${new URL(req.url).pathname}`) })
  const other = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('host secret') })
  return {
    port: gateway.port!,
    otherPort: other.port!,
    [Symbol.dispose]: () => {
      gateway.stop(true)
      other.stop(true)
    },
  }
}

/** Whether real sandbox tests can run here; when not, the reason (printed by the skipping test). */
export function hostSandboxSkipReason(): string | null {
  return skipAllowed(process.getuid?.() !== 0 ? 'not root: cgroups and bwrap network namespaces need root' : null)
}

/**
 * A reason to skip real-sandbox tests, passed through only off CI: under `CI=true` a missing
 * sandbox is a failure (the file throws), so CI can never turn green by skipping.
 */
export function skipAllowed(reason: string | null): string | null {
  if (reason && process.env.CI && process.env.CI !== 'false') throw new Error(`real sandbox tests cannot run under CI: ${reason}`)
  return reason
}

export async function text(stream: ReadableStream<Uint8Array>): Promise<string> {
  return new Response(stream).text()
}

/** A live process (a zombie waiting for its parent to reap it is dead). */
export function alive(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z'
  } catch {
    return false
  }
}

/** A number from a one-line file (a cgroup counter), 0 when it is missing or empty. */
export function readNumber(path: string): number {
  try {
    return Number(readFileSync(path, 'utf8').trim()) || 0
  } catch {
    return 0
  }
}
