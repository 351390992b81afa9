/**
 * Attacks on and failures of a Project's environment (contract sections 7, 10 and 11), through the
 * real path: the app with real SQLite on the real sandbox drivers, the scripted model driving a
 * real Claude Code CLI. A setup that fails, runs out of time or floods its output; secrets in the
 * host's process table, the server's log and the API's answers; a sandbox that tries the network
 * without the proxy, or through it to a host not allowed or not public; a changed secret; and the
 * prebuilt images a new revision or commit must not reuse.
 */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { existsSync, readdirSync } from 'node:fs'
import { getPriority, networkInterfaces, setPriority } from 'node:os'
import { join } from 'node:path'
import { createHash } from 'node:crypto'
import { resolveHost } from '../../src/egress/address-policy'
import { sandboxScope } from '../../src/server'
import { SETUP_LOG_MAX_BYTES } from '../../src/runtime/environment'
import { makeTestApp, type TestApp } from '../helpers/app'
import { startGithubApp, type GithubApp } from '../helpers/github-app'
import { req, script } from '../helpers/http'
import { poll } from '../helpers/poll'
import { adminWith } from '../helpers/server'
import { settled } from '../helpers/sessions'
import { expectResponsive, processTable, watchServer } from './helpers'
import { runscPath } from '../../sandbox/gvisor/runsc-binary'

const MiB = 1024 * 1024
/** Names the test makes up; its resolver says they are the host's loopback. */
const ALLOWED_HOST = 'registry.test'
const OTHER_HOST = 'other.test'
const resolve = async (name: string) => (name === ALLOWED_HOST || name === OTHER_HOST ? ['127.0.0.1'] : resolveHost(name))

/** The host's first non-loopback IPv4 address: what a sandbox must not reach directly. */
function hostAddress(): string {
  for (const list of Object.values(networkInterfaces()))
    for (const entry of list ?? []) if (entry.family === 'IPv4' && !entry.internal) return entry.address
  throw new Error('the host has no non-loopback IPv4 address')
}

/** A plain http server on every host address, counting what reaches it: the sandbox's would-be target. */
function startListener() {
  const requests: string[] = []
  const server = Bun.serve({
    hostname: '0.0.0.0',
    port: 0,
    fetch(request) {
      requests.push(new URL(request.url).pathname)
      return new Response('host-listener-answer\n')
    },
  })
  return { port: server.port!, requests, stop: () => server.stop(true) }
}

let listener: ReturnType<typeof startListener>
beforeAll(() => {
  listener = startListener()
})
afterAll(() => listener?.stop())

/** One app's view of a Project, as an org admin uses it. */
function projectOf(t: TestApp, name: string, repo: string | null = null) {
  const project = t.identity.createProject('acme', name, repo)
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await t.app.handle(req(method, path, { token: t.admin.token, ...(body !== undefined ? { body } : {}) }))
    return { status: res.status, text: await res.text() }
  }
  const session = (id: string, rest = '') => `/o/acme/p/${name}/sessions/${id}${rest}`
  const self = {
    id: project.id,
    call,
    async environment(env: Record<string, unknown>): Promise<any> {
      const res = await call('PUT', `/o/acme/projects/${name}/environment`, env)
      expect(res.status, res.text).toBe(200)
      return JSON.parse(res.text)
    },
    async secret(key: string, value: string): Promise<void> {
      const res = await call('PUT', `/o/acme/projects/${name}/secrets/${key}`, { value })
      expect(res.status, res.text).toBe(204)
    },
    /** Starts a session whose first turn runs the scripted `steps`; its id. */
    async start(steps: unknown[]): Promise<string> {
      const res = await call('POST', `/o/acme/p/${name}/sessions`, { agent: 'harness_1', prompt: script(steps) })
      expect(res.status, res.text).toBe(202)
      return JSON.parse(res.text).execution_id as string
    },
    async view(id: string): Promise<any> {
      return JSON.parse((await call('GET', session(id))).text)
    },
    /** Waits until the session has `turns` turns (0: it may have ended before any) and is not in progress. */
    settled(id: string, turns = 1, timeoutMs = 120_000): Promise<any> {
      return settled(() => self.view(id), { turns, timeoutMs, explain: async () => `logs: ${(await self.logs(id)).slice(-2000)}` })
    },
    async logs(id: string): Promise<string> {
      return JSON.parse((await call('GET', session(id, '/logs'))).text).logs as string
    },
    /** What the turns' tool calls printed, in order. */
    outputs(id: string): string[] {
      return t.store
        .allEvents(id)
        .filter((e) => e.type === 'tool_result')
        .map((e) => String(e.data.output ?? ''))
    },
    /** Every answer of the session routes and the Project routes about this session, as text. */
    async answers(id: string): Promise<string[]> {
      const paths = ['', '/messages', '/logs', '/trajectory', '/tool-calls', '/result', '/artifacts', '/changes'].map((rest) =>
        session(id, rest),
      )
      paths.push(
        `/o/acme/p/${name}/sessions`,
        '/o/acme/sessions',
        '/o/acme/projects',
        `/o/acme/projects/${name}/secrets`,
        `/o/acme/projects/${name}/environment`,
      )
      const texts = await Promise.all(
        paths.map(async (path) => {
          const res = await call('GET', path)
          expect(res.status, `${path}: ${res.text.slice(0, 200)}`).toBe(200)
          return `${path}: ${res.text}`
        }),
      )
      // The event stream of an ended session: its stored events, then `done`.
      const events = await t.app.handle(req('GET', session(id, '/events'), { token: t.admin.token }))
      const reader = events.body!.getReader()
      let streamed = ''
      const deadline = Date.now() + 3000
      while (Date.now() < deadline && !streamed.includes('event: done')) {
        const chunk = await Promise.race([reader.read(), Bun.sleep(deadline - Date.now()).then(() => null)])
        if (!chunk || chunk.done) break
        streamed += new TextDecoder().decode(chunk.value)
      }
      await reader.cancel().catch(() => {})
      expect(streamed).toContain('event: done')
      texts.push(`events: ${streamed}`)
      return texts
    },
  }
  return self
}

/** Prebuilt images as the database and DATA_DIR/prebuilds hold them. */
function prebuilds(t: TestApp): { rows: { id: string; project_id: string; revision: number }[]; files: string[] } {
  const db = new Database(t.config.dbPath, { readonly: true })
  try {
    const rows = db.query('SELECT id, project_id, revision FROM project_prebuilds ORDER BY created_at').all() as {
      id: string
      project_id: string
      revision: number
    }[]
    const dir = join(t.dir, 'prebuilds')
    const files = existsSync(dir) ? readdirSync(dir).sort() : []
    return { rows, files }
  } finally {
    db.close()
  }
}

/** Host processes whose argv contains `text` (not this test's own). */
function processesWith(text: string): string[] {
  return processTable()
    .filter((p) => p.pid !== String(process.pid) && p.cmdline.includes(text))
    .map((p) => `${p.pid}: ${p.cmdline.replaceAll('\0', ' ').slice(0, 200)}`)
}

/** A bash step that runs a node script (base64, so no quoting can break it). */
const nodeStep = (code: string) => ({
  bash: `echo ${Buffer.from(code).toString('base64')} | base64 -d > /tmp/probe.js && node /tmp/probe.js`,
})

for (const driver of ['bwrap', 'gvisor'] as const) {
  describe(`Project environment attacks on ${driver}`, () => {
    let t: TestApp
    const serverLog: string[] = []
    let url: string
    let priority = 0
    beforeAll(async () => {
      // agentd runs above its sandboxes: the test process is agentd here (as in output-flood.test.ts).
      priority = getPriority()
      setPriority(-10)
      t = await makeTestApp(
        { AGENTD_SANDBOX: driver, AGENTD_EGRESS_ALLOW_PRIVATE: '1' },
        { resolveHost: resolve, log: (line, fields) => serverLog.push(fields ? `${line} ${JSON.stringify(fields)}` : line) },
      )
      url = t.listen()
    }, 60_000)
    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
      setPriority(priority)
    }, 60_000)

    test('a setup that exits 3: the session fails with `setup failed: exit 3`, no CLI ran, no model request, its lines are logged, no image is kept', async () => {
      const p = projectOf(t, 'fails')
      await p.environment({ setup: 'echo before the failure\nexit 3\necho never' })
      const id = await p.start([{ bash: 'echo the turn ran' }, { answer: 'should not run' }])
      const view = await p.settled(id, 0)
      const logs = await p.logs(id)
      expect(view.status, logs).toBe('failed')
      expect(view.error).toBe('setup failed: exit 3')
      expect(logs).toContain('agentd: setup started')
      expect(logs).toContain('setup: before the failure\n')
      expect(logs).not.toContain('never')
      // No model request (the gateway logs one line per request) and no tool ran.
      expect(logs).not.toContain('gateway:')
      const events = t.store.allEvents(id)
      expect(events.filter((e) => e.type === 'tool_result')).toEqual([])
      expect(events.filter((e) => e.type === 'init')).toEqual([])
      expect(events.some((e) => e.kind === 'log' && e.type === 'stderr')).toBe(false)
      // Nothing kept of its disk: no row of the Project, no image file without a row.
      const kept = prebuilds(t)
      expect(kept.rows.filter((row) => row.project_id === p.id)).toEqual([])
      expect(kept.files).toEqual(kept.rows.map((row) => `${row.id}.img`).sort())
      expect(logs).not.toContain('kept prebuilt image')
    }, 180_000)

    test('a setup past setup_timeout_s: `setup timed out after 2 s`, and none of its processes is left on the host', async () => {
      const p = projectOf(t, 'slow')
      // A duration nothing else on the machine sleeps for; one of the two holds the output pipe open.
      const marker = `1000.${crypto.randomUUID().replace(/\D/g, '').slice(0, 6)}`
      await p.environment({ setup: `echo sleeping\nsleep ${marker} &\nsleep ${marker}`, setup_timeout_s: 2 })
      const id = await p.start([{ answer: 'should not run' }])
      const view = await p.settled(id, 0)
      const logs = await p.logs(id)
      expect(view.status, logs).toBe('failed')
      expect(view.error).toBe('setup timed out after 2 s')
      expect(logs).toContain('setup: sleeping')
      expect(logs).not.toContain('gateway:')
      // The sandbox goes (its folder last, once its processes are dead); then nothing of it runs.
      await poll('the sandbox removed', () => !existsSync(join(t.dir, 'sandboxes', id)), { timeoutMs: 30_000 })
      expect(processesWith(`sleep\0${marker}`)).toEqual([])
      expect(processesWith(join(t.dir, 'sandboxes', id))).toEqual([])
      if (driver === 'gvisor') {
        // The container is gone: no runsc process (its sentry, gofer, or the driver's own `delete`
        // finishing) names it any more, and runsc lists none of the sandbox's.
        const runsc = processTable().filter((proc) => /^(\S*\/)?runsc/.test(proc.cmdline) && proc.cmdline.includes(id))
        await poll(
          'runsc to be done with the sandbox',
          () => processTable().every((proc) => !(/^(\S*\/)?runsc/.test(proc.cmdline) && proc.cmdline.includes(id))),
          { timeoutMs: 30_000 },
        )
        const listed = Bun.spawnSync([runscPath(), `--root=/run/agentd/${sandboxScope(t.dir)}/runsc`, 'list', '-quiet'])
        expect(listed.exitCode, listed.stderr.toString()).toBe(0)
        expect(
          listed.stdout
            .toString()
            .split('\n')
            .filter((cid) => cid.startsWith(id)),
        ).toEqual([])
        // When its folder went, its sentry and gofer were dead already: what named it was at most the driver's `delete`, left to finish in the background.
        expect(runsc.map((proc) => proc.cmdline.split('\0')[2])).toEqual(runsc.map(() => 'delete'))
      }
    }, 180_000)

    test('a setup that prints 300 MB: the session goes on, the stored setup log is capped, memory stays flat, the API answers throughout', async () => {
      const p = projectOf(t, 'flood')
      // 100 MB of 1,000-byte lines made in /tmp, printed three times by cat in large writes (a
      // pipe of small writes is slow on gVisor); the setup waits first, so the window below opens
      // on the flood, not on the sandbox's start.
      const setup = [
        'sleep 2',
        `yes "$(head -c 999 /dev/zero | tr '\\0' a)" | head -n 100000 > /tmp/a100`,
        'cat /tmp/a100 /tmp/a100 /tmp/a100',
        'rm /tmp/a100',
        'echo flood done',
      ].join('\n')
      await p.environment({ setup })
      const id = await p.start([{ answer: 'after the flood' }])
      await poll('setup to start', async () => (await p.logs(id)).includes('agentd: setup started'), { timeoutMs: 120_000, everyMs: 100 })
      const watch = await watchServer(url)
      let view: any
      let seen: Awaited<ReturnType<typeof watch.stop>>
      try {
        view = await p.settled(id, 1, 180_000)
      } finally {
        seen = await watch.stop()
      }
      console.log(`300 MB setup on ${driver}: memory grew ${(seen.rssGrowth / MiB).toFixed(0)} MiB at its peak`)

      const logs = await p.logs(id)
      expect(view.status, logs.slice(-2000)).toBe('completed')
      expect(view.summary).toBe('after the flood')
      expect(logs).toContain('gateway:')
      // The setup's share: its lines within SETUP_LOG_MAX_BYTES, then one line counting the rest.
      const setupLines = logs.split('\n').filter((line) => line.startsWith('setup: '))
      const counted = setupLines.filter((line) => /^setup: \(about \d+ more bytes of output not kept\)$/.test(line))
      expect(counted).toHaveLength(1)
      const kept = setupLines.filter((line) => line !== counted[0]).reduce((sum, line) => sum + line.length + 1, 0)
      expect(kept).toBeLessThanOrEqual(SETUP_LOG_MAX_BYTES)
      expect(kept).toBeGreaterThan(SETUP_LOG_MAX_BYTES / 2)
      const dropped = Number(/\(about (\d+) more bytes/.exec(counted[0]!)![1])
      expect(dropped + kept).toBeGreaterThanOrEqual(300_000_000)
      // What is kept is the output's beginning: nothing after the cut, not even a short last line.
      expect(setupLines.some((line) => line.includes('flood done'))).toBe(false)
      expect(logs.length).toBeLessThan(3 * MiB)
      expect(seen.rssGrowth).toBeLessThan(200 * MiB)
      expectResponsive(`300 MB setup on ${driver}`, seen.health, seen.loop)
    }, 300_000)

    test("a secret is in no host process's argv while setup runs, nor in the server's log or any API answer", async () => {
      const p = projectOf(t, 'argv')
      const secret = `sek-${crypto.randomUUID()}`
      await p.secret('APP_TOKEN', secret)
      serverLog.length = 0
      await p.environment({ setup: 'echo "setup has $APP_TOKEN"\necho holding\nsleep 5\necho released' })
      const id = await p.start([{ bash: 'echo "turn has $APP_TOKEN"' }, { answer: 'done' }])
      await poll('setup to hold', async () => (await p.logs(id)).includes('setup: holding'), { timeoutMs: 120_000, everyMs: 100 })
      // Several scans while setup holds: each sees the sandbox, none the secret.
      for (let scan = 0; scan < 3; scan++) {
        const table = processTable()
        expect(table.some((proc) => proc.cmdline.includes(driver === 'bwrap' ? 'bwrap' : 'runsc'))).toBe(true)
        for (const { pid, cmdline, environ } of table) {
          expect(cmdline.includes(secret), `secret in argv of ${pid}: ${cmdline.replaceAll('\0', ' ').slice(0, 300)}`).toBe(false)
          expect(
            environ.includes(secret),
            `secret in the environment of host process ${pid}: ${cmdline.replaceAll('\0', ' ').slice(0, 200)}`,
          ).toBe(false)
        }
        await Bun.sleep(500)
      }
      const view = await p.settled(id)
      const logs = await p.logs(id)
      expect(view.status, logs).toBe('completed')
      // It was there to leak: setup and the turn printed it, and it reads *** everywhere.
      expect(logs).toContain('setup: setup has ***')
      expect(p.outputs(id).join('\n')).toContain('turn has ***')
      const answers = await p.answers(id)
      for (const text of answers) expect(text.includes(secret), text.slice(0, 300)).toBe(false)
      expect(answers.join('\n')).toContain('turn has ***')
      expect(serverLog.length).toBeGreaterThan(0)
      for (const line of serverLog) expect(line.includes(secret), line).toBe(false)
    }, 180_000)

    test('the sandbox has no DNS and no route but the proxy: names do not resolve, the host and the internet are not reached directly', async () => {
      const p = projectOf(t, 'nodns')
      await p.environment({ network: { allow: [`${ALLOWED_HOST}:${listener.port}`] } })
      const address = hostAddress()
      // The host reaches its listener on that address: what the sandbox tries is there.
      expect(await (await fetch(`http://${address}:${listener.port}/from-host`)).text()).toBe('host-listener-answer\n')
      const probe = `
        const dns = require('dns'), net = require('net')
        const lookup = (name) => new Promise((r) => dns.lookup(name, (err, a) => r(err ? 'failed ' + err.code : 'resolved ' + a)))
        const connect = (host, port) => new Promise((r) => {
          const s = net.connect({ host, port })
          const timer = setTimeout(() => { s.destroy(); r('timeout') }, 3000)
          s.on('connect', () => { clearTimeout(timer); s.destroy(); r('connected') })
          s.on('error', (e) => { clearTimeout(timer); r('failed ' + e.code) })
        })
        ;(async () => {
          const out = {
            proxy: process.env.HTTPS_PROXY || 'none',
            example: await lookup('example.com'),
            allowed: await lookup('${ALLOWED_HOST}'),
            host: await connect('${address}', ${listener.port}),
            loopback: await connect('127.0.0.1', ${listener.port}),
            internet: await connect('1.1.1.1', 443),
          }
          console.log('NET ' + JSON.stringify(out))
        })()
      `
      const bash = [
        `timeout 10 getent hosts example.com; echo "getent=$?"`,
        `env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy curl -sS --noproxy '*' --max-time 5 -o /dev/null -w 'direct=%{http_code}\\n' http://${address}:${listener.port}/direct; true`,
        `curl -sS --max-time 10 http://${ALLOWED_HOST}:${listener.port}/through-proxy; true`,
      ].join('; ')
      const before = listener.requests.length
      const id = await p.start([nodeStep(probe), { bash }, { answer: 'probed' }])
      const view = await p.settled(id)
      const logs = await p.logs(id)
      expect(view.status, logs).toBe('completed')
      const [node, shell] = p.outputs(id)
      const net = JSON.parse(/NET (\{.*\})/.exec(node ?? '')?.[1] ?? 'null')
      expect(net, node).not.toBeNull()
      expect(net.proxy).toStartWith('http://')
      expect(net.example).toStartWith('failed')
      expect(net.allowed).toStartWith('failed')
      expect(net.host).not.toBe('connected')
      expect(net.loopback).not.toBe('connected')
      expect(net.internet).not.toBe('connected')
      expect(shell).toContain('getent=2')
      expect(shell).toContain('direct=000')
      // Through the proxy the same listener answers: the network is there, by that road only.
      expect(shell).toContain('host-listener-answer')
      expect(listener.requests.slice(before)).toEqual(['/through-proxy'])
    }, 180_000)

    test('through the proxy a host not on the list is 403 and logged as `egress denied`', async () => {
      const p = projectOf(t, 'denied')
      await p.environment({ network: { allow: [`${ALLOWED_HOST}:${listener.port}`] } })
      const before = listener.requests.length
      const id = await p.start([
        {
          bash: `curl -sS --max-time 10 -o /dev/null -w 'connect=%{http_connect}\\n' https://${OTHER_HOST}/; curl -sS --max-time 10 -o /dev/null -w 'plain=%{http_code}\\n' http://${OTHER_HOST}:${listener.port}/denied; true`,
        },
        { answer: 'tried' },
      ])
      const view = await p.settled(id)
      const logs = await p.logs(id)
      expect(view.status, logs).toBe('completed')
      const output = p.outputs(id).join('\n')
      expect(output).toContain('connect=403')
      expect(output).toContain('plain=403')
      expect(logs).toContain(`egress denied: ${OTHER_HOST}:443`)
      expect(logs).toContain(`egress denied: ${OTHER_HOST}:${listener.port}`)
      expect(listener.requests.slice(before)).toEqual([])
    }, 180_000)

    test('a changed secret reaches the next turn; the old and the new value both read ***', async () => {
      const p = projectOf(t, 'rotate')
      const first = `first-${crypto.randomUUID()}`
      const second = `second-${crypto.randomUUID()}`
      await p.secret('APP_TOKEN', first)
      const id = await p.start([{ bash: 'printf %s "$APP_TOKEN" > /workspace/old; echo "first turn: $APP_TOKEN"' }, { answer: 'one' }])
      const one = await p.settled(id)
      expect(one.status, await p.logs(id)).toBe('completed')
      await p.secret('APP_TOKEN', second)
      const sent = await p.call('POST', `/o/acme/p/rotate/sessions/${id}/messages`, {
        content: script([
          { bash: 'echo "second turn: $APP_TOKEN was $(cat /workspace/old) sha $(printf %s "$APP_TOKEN" | sha256sum | head -c 16)"' },
          { answer: 'two' },
        ]),
      })
      expect(sent.status, sent.text).toBe(200)
      const two = await p.settled(id, 2)
      expect(two.status, await p.logs(id)).toBe('completed')
      const sha = createHash('sha256').update(second).digest('hex').slice(0, 16)
      expect(p.outputs(id)).toEqual(['first turn: ***', `second turn: *** was *** sha ${sha}`])
      const stored = JSON.stringify([t.store.allEvents(id), t.store.transcriptLines(id), await p.answers(id)])
      expect(stored).not.toContain(first)
      expect(stored).not.toContain(second)
    }, 180_000)
  })
}

/**
 * On bwrap, an agentd as an operator runs it: AGENTD_EGRESS_ALLOW_PRIVATE unset, one prebuilt
 * image kept per Project, and a code host (the GitHub App stand-in and a real git server) for a
 * Project with a repository.
 */
describe('Project environment on bwrap without AGENTD_EGRESS_ALLOW_PRIVATE, one prebuilt image per Project', () => {
  const INSTALLATION = 303
  let host: GithubApp
  let t: TestApp
  beforeAll(async () => {
    host = await startGithubApp()
    host.git.repo('acme', 'app', { 'README.md': 'one' })
    host.github.installations.set(INSTALLATION, { account: 'acme', repositories: ['acme/app'], suspended: false })
    t = await makeTestApp({ AGENTD_SANDBOX: 'bwrap', ...host.env, AGENTD_PREBUILDS_PER_PROJECT: '1' }, { resolveHost: resolve })
    const linked = await adminWith(host.env, t.dir, 'github', 'link', '--org', 'acme', '--installation', String(INSTALLATION))
    expect(linked.json, linked.stderr).toMatchObject({ installation_id: INSTALLATION })
  }, 60_000)
  afterAll(async () => {
    await t?.[Symbol.asyncDispose]()
    host?.stop()
  }, 60_000)

  /** The id of the image a session's log says it kept, or null. */
  const keptIn = (logs: string) => /agentd: kept prebuilt image (\S+)/.exec(logs)?.[1] ?? null
  /** Runs a session to its first turn's end; its logs. */
  const run = async (p: ReturnType<typeof projectOf>) => {
    const id = await p.start([{ answer: 'ok' }])
    const view = await p.settled(id)
    const logs = await p.logs(id)
    expect(view.status, logs).toBe('completed')
    return logs
  }

  test('an allowed name that resolves to a loopback address is refused: 403 and `egress refused` in the logs', async () => {
    const p = projectOf(t, 'private')
    await p.environment({ network: { allow: [`${ALLOWED_HOST}:${listener.port}`] } })
    const before = listener.requests.length
    const id = await p.start([
      {
        bash: `curl -sS --max-time 10 -o /dev/null -w 'plain=%{http_code}\\n' http://${ALLOWED_HOST}:${listener.port}/private; curl -sS --max-time 10 -o /dev/null -w 'connect=%{http_connect}\\n' https://${ALLOWED_HOST}:${listener.port}/; true`,
      },
      { answer: 'tried' },
    ])
    const view = await p.settled(id)
    const logs = await p.logs(id)
    expect(view.status, logs).toBe('completed')
    const output = p.outputs(id).join('\n')
    expect(output).toContain('plain=403')
    expect(output).toContain('connect=403')
    expect(logs).toContain(`egress refused: ${ALLOWED_HOST}:${listener.port} resolves to a non-public address (127.0.0.1)`)
    expect(logs).not.toContain('egress denied')
    expect(listener.requests.slice(before)).toEqual([])
  }, 180_000)

  test('a new revision of the environment runs setup again', async () => {
    const p = projectOf(t, 'revision')
    const env = { setup: 'echo "setting up"' }
    expect((await p.environment(env)).revision).toBe(1)
    const first = await run(p)
    expect(first).toContain('agentd: setup started')
    const image = keptIn(first)
    expect(image).not.toBeNull()
    // The same key: the image is used, setup does not run.
    const again = await run(p)
    expect(again).toContain(`setup: reused prebuilt image ${image}`)
    expect(again).not.toContain('agentd: setup started')
    // The same environment PUT again is a new revision: setup runs.
    expect((await p.environment(env)).revision).toBe(2)
    const next = await run(p)
    expect(next).toContain('agentd: setup started')
    expect(next).toContain('setup: setting up')
    expect(next).not.toContain('reused prebuilt image')
    expect(keptIn(next)).not.toBeNull()
  }, 180_000)

  test('a new commit of the repository runs setup again', async () => {
    const p = projectOf(t, 'app', 'acme/app')
    await p.environment({ setup: 'echo "setup saw $(cat README.md)"' })
    const first = await run(p)
    expect(first).toContain('setup: setup saw one')
    const image = keptIn(first)
    expect(image).not.toBeNull()
    expect(await run(p)).toContain(`setup: reused prebuilt image ${image}`)
    host.git.commit('acme', 'app', { 'README.md': 'two' })
    const next = await run(p)
    expect(next).toContain('agentd: setup started')
    expect(next).toContain('setup: setup saw two')
    expect(next).not.toContain('reused prebuilt image')
  }, 180_000)

  test('AGENTD_PREBUILDS_PER_PROJECT=1: after two revisions each kept an image, only the newest is on disk', async () => {
    const p = projectOf(t, 'keep')
    await p.environment({ setup: 'echo one > /workspace/built' })
    const older = keptIn(await run(p))
    await p.environment({ setup: 'echo two > /workspace/built' })
    const newer = keptIn(await run(p))
    expect(older).not.toBeNull()
    expect(newer).not.toBeNull()
    expect(newer).not.toBe(older)
    const kept = prebuilds(t)
    expect(kept.rows.filter((row) => row.project_id === p.id).map((row) => row.id)).toEqual([newer!])
    expect(kept.files).toContain(`${newer}.img`)
    expect(kept.files).not.toContain(`${older}.img`)
    // No file without its row, whichever Project.
    expect(kept.files).toEqual(kept.rows.map((row) => `${row.id}.img`).sort())
  }, 180_000)
})
