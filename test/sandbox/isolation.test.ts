import { afterAll, describe, expect, test } from 'bun:test'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { BwrapDriver } from '../../sandbox/bwrap/driver'
import type { SandboxDriver, SandboxHandle } from '../../sandbox/driver'
import { GvisorDriver, gvisorWorks } from '../../sandbox/gvisor/driver'
import { fakeGateway, hostSandboxSkipReason, skipAllowed, removeScope, specFor, tempRoot, testScope, text } from './helpers'

/**
 * What a process in an isolated sandbox can reach: the model gateway, its own workspace and home,
 * a read-only system. Not: other listeners on the host's loopback, other sandboxes' files, host
 * secrets, host processes, the server's environment.
 */
const skip = hostSandboxSkipReason()
if (skip) console.warn(`test/sandbox/isolation: skipped (${skip})`)
const gvisorSkip = skip ?? skipAllowed(gvisorWorks() ? null : 'runsc does not work here')
if (!skip && gvisorSkip) console.warn(`test/sandbox/isolation: gvisor skipped (${gvisorSkip})`)

const root = tempRoot()
const gateway = fakeGateway()
afterAll(async () => {
  await root[Symbol.asyncDispose]()
  gateway[Symbol.dispose]()
})

const scope = testScope()
afterAll(async () => {
  if (!skip) await new BwrapDriver({ scope }).sweep([])
  if (!gvisorSkip) await new GvisorDriver({ scope, log: () => {} }).sweep([])
  removeScope(scope)
})
const drivers: [string, string | null, () => SandboxDriver][] = [
  ['bwrap', skip, () => new BwrapDriver({ scope })],
  ['gvisor', gvisorSkip, () => new GvisorDriver({ scope })],
]

for (const [kind, reason, make] of drivers) {
  describe.skipIf(reason !== null)(`${kind} isolation`, () => {
    let driver: SandboxDriver
    let mine: SandboxHandle
    let theirs: SandboxHandle
    const node = (handle: SandboxHandle, code: string) =>
      driver.exec(handle, ['/usr/bin/node', '-e', code], { env: { PATH: '/usr/bin:/bin', HOME: handle.home, GW: handle.gatewayUrl } })
    const sh = (handle: SandboxHandle, script: string) =>
      driver.exec(handle, ['/bin/sh', '-c', script], { env: { PATH: '/usr/bin:/bin', HOME: handle.home } })
    const run = async (proc: ReturnType<typeof sh>) => {
      const [out, err, code] = await Promise.all([text(proc.stdout), text(proc.stderr), proc.exited])
      return { out, err, code }
    }

    test('two sandboxes start', async () => {
      driver = make()
      mine = await driver.create(specFor(root.path, `${kind}-mine`, gateway.port))
      theirs = await driver.create(specFor(root.path, `${kind}-theirs`, gateway.port))
      writeFileSync(join(theirs.hostWorkspace, 'planted.txt'), 'their secret')
      writeFileSync(join(theirs.hostHome, '.credentials'), 'their token')
    })

    test('the gateway answers at gatewayUrl', async () => {
      const { out } = await run(node(mine, 'fetch(process.env.GW + "/v1/messages").then(r => r.text()).then(t => console.log(t))'))
      expect(out).toBe('gateway /v1/messages\n')
    })

    test("a TCP connection to another listener on the host's 127.0.0.1 fails", async () => {
      const code = `const s = require('net').connect(${gateway.otherPort}, '127.0.0.1'); s.on('connect', () => { console.log('CONNECTED'); process.exit(0) }); s.on('error', e => { console.log(e.code); process.exit(0) })`
      const { out } = await run(node(mine, code))
      expect(out).toBe('ECONNREFUSED\n')
      // Not through another address either.
      const { out: outside } = await run(
        node(
          mine,
          `require('net').connect(53, '1.1.1.1').on('connect', () => console.log('CONNECTED')).on('error', e => console.log('blocked'))`,
        ),
      )
      expect(outside).toBe('blocked\n')
    })

    test("another sandbox's workspace and home are not there", async () => {
      const paths = [join(theirs.hostWorkspace, 'planted.txt'), join(theirs.hostHome, '.credentials'), theirs.hostWorkspace, root.path]
      const { out } = await run(
        sh(
          mine,
          paths.map((p) => `test -e '${p}' && echo "visible ${p}"`).join('; ') +
            '; cat /workspace/planted.txt 2>&1 >/dev/null | head -c 0; echo done',
        ),
      )
      expect(out).toBe('done\n')
      const { out: found } = await run(
        sh(
          mine,
          'find / -path /proc -prune -o -path /usr -prune -o \\( -name planted.txt -o -name .credentials \\) -print 2>/dev/null; echo end',
        ),
      )
      expect(found).toBe('end\n')
    }, 30_000)

    test("host secrets and the server's environment are not visible", async () => {
      const { out } = await run(
        sh(
          mine,
          'for f in /etc/shadow /etc/ssl/private /root /sys/fs/cgroup/freezer/agentd; do test -e $f && echo "visible $f"; done; env | sort | cut -d= -f1 | tr "\\n" " "',
        ),
      )
      expect(out).toBe('HOME PATH PWD ')
    })

    test('only its own processes are visible', async () => {
      const { out } = await run(sh(mine, 'ls /proc | grep -c "^[0-9]"'))
      expect(Number(out.trim())).toBeLessThan(10)
    })

    test('the workspace is writable, the system is not', async () => {
      const { out } = await run(
        sh(
          mine,
          'echo hi > /workspace/w && echo ws-ok; echo x > /usr/x 2>/dev/null || echo usr-ro; echo x > /etc/x 2>/dev/null || echo etc-ro',
        ),
      )
      expect(out).toBe('ws-ok\nusr-ro\netc-ro\n')
    })

    test('lsb_release is masked (a slow script Codex runs at start): it cannot run; /etc/os-release names the system', async () => {
      if (!existsSync('/usr/bin/lsb_release')) return void console.warn('no /usr/bin/lsb_release on this host: nothing to mask')
      const masked = await run(sh(mine, '/usr/bin/lsb_release -a; echo "exit $?"; wc -c < /usr/bin/lsb_release'))
      expect(masked.out).toContain('exit 126')
      expect(masked.out.trim().split('\n').at(-1)).toBe('0')
      const release = await run(sh(mine, '. /etc/os-release && echo "$ID"'))
      expect(release.out.trim()).toBe(
        readFileSync('/etc/os-release', 'utf8')
          .match(/^ID=(.*)$/m)![1]!
          .replace(/"/g, ''),
      )
    })

    test('cleanup', async () => {
      await driver.destroy(mine)
      await driver.destroy(theirs)
    })
  })
}
