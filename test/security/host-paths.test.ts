/**
 * Attack: the sandbox plants links (and FIFOs) where agentd, as root on the host, reads or writes
 * its files: the artifacts folder, the CLI config files in the home, gVisor's exec output folder.
 * The sandbox cannot see the host's files, but it can name any absolute host path in a link: the
 * attack is that agentd follows it. Nothing of the host may come back, nothing may be written.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs'
import { dirname, join } from 'node:path'
import type { TestApp } from '../helpers/app'
import { SANDBOX_IO_DIR } from '../../sandbox/gvisor/spec'
import { caller, followUp, hostCanary, ISOLATING, runSession, script, securityApp, turnEnded } from './helpers'

const SCHEMA = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false }

/** Everything a tenant can read of session `id`, as one string: views, transcripts, logs, artifacts and their bytes. */
async function everythingOf(t: TestApp, id: string): Promise<string> {
  const base = `/o/acme/p/_/sessions/${id}`
  const parts: string[] = []
  for (const path of ['', '/messages', '/tool-calls', '/logs', '/result', '/artifacts', '/trajectory']) {
    const res = await t.app.handle(new Request(`http://localhost${base}${path}`, { headers: { authorization: `Bearer ${t.admin.token}` } }))
    parts.push(await res.text())
  }
  const raw = await t.app.handle(
    new Request(`http://localhost${base}/trajectory`, {
      headers: { authorization: `Bearer ${t.admin.token}`, accept: 'application/x-ndjson' },
    }),
  )
  parts.push(await raw.text())
  const { body } = await caller(t)('GET', `${base}/artifacts`)
  for (const { name } of body.artifacts ?? []) {
    const res = await t.app.handle(
      new Request(`http://localhost${base}/artifacts/${encodeURIComponent(name)}`, {
        headers: { authorization: `Bearer ${t.admin.token}` },
      }),
    )
    parts.push(await res.text())
  }
  return parts.join('\n')
}

/**
 * Whether the sandbox really made the link at `path` (below its host folder): an attack whose
 * plant failed would prove nothing.
 */
function planted(t: TestApp, id: string, path: string): boolean {
  return lstatSync(join(t.dir, 'sandboxes', id, path), { throwIfNoEntry: false })?.isSymbolicLink() ?? false
}

async function artifactNames(t: TestApp, id: string): Promise<string[]> {
  const { status, body } = await caller(t)('GET', `/o/acme/p/_/sessions/${id}/artifacts`)
  expect(status).toBe(200)
  return body.artifacts.map((a: { name: string }) => a.name)
}

/** Starts a session of `agent` on `steps` and waits for its first turn. */
async function start(t: TestApp, agent: string, steps: unknown[], extra: Record<string, unknown> = {}): Promise<any> {
  const created = await caller(t)('POST', '/o/acme/p/_/sessions', { agent, prompt: script(steps), ...extra })
  if (created.status !== 200 && created.status !== 202) throw new Error(`create failed: ${created.status} ${JSON.stringify(created.body)}`)
  return turnEnded(t, created.body.execution_id, 1)
}

for (const kind of ISOLATING) {
  describe(`host paths on ${kind}`, () => {
    let t: TestApp
    let canary: ReturnType<typeof hostCanary>

    beforeAll(async () => {
      t = await securityApp(kind)
      canary = hostCanary()
      // A host folder shaped like an artifacts folder, for links that replace `.agentd` itself.
      mkdirSync(join(canary.dir, 'artifacts'))
      writeFileSync(join(canary.dir, 'artifacts', 'canary.txt'), `${canary.secret}\n`)
    }, 60_000)

    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
      canary?.[Symbol.dispose]()
    }, 60_000)

    test(kind === 'gvisor'
      ? 'links, hard links and FIFOs in the artifacts folder, and links in the exec output folder, yield no host bytes and no hang'
      : 'links, hard links and FIFOs in the artifacts folder never turn host files into artifacts', async () => {
      const art = '/workspace/.agentd/artifacts'
      const plant = [
        `mkdir -p ${art}/sub`,
        `echo ok > ${art}/ok.txt`,
        `ln -s ${canary.path} ${art}/leak.txt`,
        // Folders on the way to a host file: the walk would go through them.
        `ln -s ${canary.dir} ${art}/sub/dir`,
        `ln -s ${join(canary.dir, 'artifacts')} ${art}/more`,
        `mkfifo ${art}/pipe`,
        `echo mine > /workspace/h && ln /workspace/h ${art}/hard.txt`,
      ]
      if (kind === 'gvisor') {
        // gVisor's exec output folder: the files of this very exec, which agentd tails.
        const io = SANDBOX_IO_DIR
        plant.push(
          // The only `.pid` there while the turn runs (globs, not ls: the host's ls cannot stat this mount under gVisor).
          `for f in ${io}/*.pid; do p=\${f%.pid}; done && test -f "$p.pid"`,
          // Followed on the host, reading the exit file would never end (and fill agentd's memory).
          `ln -sf /dev/zero $p.exit`,
          `ln -sf ${canary.path} $p.pid`,
          `ln -sf ${canary.path} $p.out`,
          `ln -sf ${canary.path} $p.err`,
          // Left behind, so the host side can show a link made here is a link there.
          `ln -s ${canary.path} ${io}/probe.link`,
        )
      }
      const view = await runSession(t, [{ bash: plant.join(' && ') }, { answer: 'planted' }])
      const id = view.execution_id
      // (On gVisor: the exit link was ignored until the exec's real exit file replaced it.)
      expect(view.status).not.toBe('failed')
      for (const link of ['leak.txt', 'sub/dir', 'more']) expect(planted(t, id, `workspace/.agentd/artifacts/${link}`)).toBe(true)
      if (kind === 'gvisor') expect(planted(t, id, 'sandbox/disk/io/probe.link')).toBe(true)
      expect(await artifactNames(t, id)).toEqual(['ok.txt'])
      const ok = await t.app.handle(
        new Request(`http://localhost/o/acme/p/_/sessions/${id}/artifacts/ok.txt`, {
          headers: { authorization: `Bearer ${t.admin.token}` },
        }),
      )
      expect(await ok.text()).toBe('ok\n')
      expect(await everythingOf(t, id)).not.toContain(canary.secret)
      // The copy in DATA_DIR is agentd's own, created private.
      const blobs = join(t.dir, 'blobs')
      expect(statSync(blobs).mode & 0o777).toBe(0o700)
      for (const dir of readdirSync(blobs)) {
        expect(statSync(join(blobs, dir)).mode & 0o777).toBe(0o700)
        for (const blob of readdirSync(join(blobs, dir))) expect(statSync(join(blobs, dir, blob)).mode & 0o777).toBe(0o600)
      }
    }, 120_000)

    test('links planted for the next turn: config files are replaced (the caller-chosen schema reaches no host path), a linked config folder fails the turn, a linked artifacts folder yields nothing', async () => {
      const schemaTarget = join(canary.dir, 'schema-written.json')
      const modelsTarget = join(canary.dir, 'models-written.json')
      const victim = join(canary.dir, 'victim')
      mkdirSync(victim)
      // On gVisor the links are made from the host side, exactly as a sandbox's `ln -s` leaves
      // them, and Codex runs no command: Codex on gVisor 2022 can hang for ever on a child shell
      // it never reaps (docs/decisions.md). The attack is what agentd does with the links.
      const viaHost = kind === 'gvisor'
      const links: [string, string][] = [
        ['home/.codex/output-schema.json', schemaTarget],
        ['home/.codex/agentd-models.json', modelsTarget],
        ['home/.codex/config.toml', canary.path],
        // The whole artifacts folder a link to a host folder (the host's /etc, or DATA_DIR).
        ['workspace/.agentd/artifacts', canary.dir],
      ]
      const plant = [
        'mkdir -p ~/.codex /workspace/.agentd',
        `ln -sf ${schemaTarget} ~/.codex/output-schema.json`,
        `ln -sf ${modelsTarget} ~/.codex/agentd-models.json`,
        `ln -sf ${canary.path} ~/.codex/config.toml`,
        `ln -s ${canary.dir} /workspace/.agentd/artifacts`,
      ].join(' && ')
      const first = await start(t, 'harness_2', [...(viaHost ? [] : [{ bash: plant }]), { structured: { ok: true } }], {
        output_schema: SCHEMA,
      })
      const id = first.execution_id
      expect(first.status).not.toBe('failed')
      const sandboxPath = (path: string) => join(t.dir, 'sandboxes', id, path)
      if (viaHost) {
        for (const [path, target] of links) {
          mkdirSync(dirname(sandboxPath(path)), { recursive: true })
          rmSync(sandboxPath(path), { recursive: true, force: true })
          symlinkSync(target, sandboxPath(path))
        }
      }
      for (const [path] of links) expect(planted(t, id, path)).toBe(true)
      expect(await artifactNames(t, id)).toEqual([])

      // The next turn writes its config files in place of the links and runs on them. Its
      // tool then puts a link to a host folder in place of the config folder: made inside the
      // sandbox too (its own /tmp), so the CLI goes on working through it. (mv, not rm -rf,
      // which the CLI declines to run.)
      const relink = `mkdir -p ${victim} && cp -a ~/.codex/. ${victim}/ && mv ~/.codex ~/.codex-old && ln -s ${victim} ~/.codex`
      const second = await followUp(t, id, [...(viaHost ? [] : [{ bash: relink }]), { structured: { ok: true } }], 2)
      expect(second.status).not.toBe('failed')
      expect(existsSync(schemaTarget)).toBe(false)
      expect(existsSync(modelsTarget)).toBe(false)
      expect(readFileSync(canary.path, 'utf8')).toBe(`${canary.secret}\n`)
      expect(await artifactNames(t, id)).toEqual([])
      if (viaHost) {
        renameSync(sandboxPath('home/.codex'), sandboxPath('home/.codex-old'))
        symlinkSync(victim, sandboxPath('home/.codex'))
      }
      expect(planted(t, id, 'home/.codex')).toBe(true)

      // The next turn refuses to write through the linked folder, and says why.
      const third = await followUp(t, id, [{ structured: { ok: true } }], 3)
      expect(third.status).toBe('failed')
      expect(JSON.stringify(third)).toContain('.codex is a link or not a directory: refused')
      // The host's own layout is not in the message.
      expect(JSON.stringify(third)).not.toContain(t.dir)
      expect(readdirSync(victim)).toEqual([])
      expect(await everythingOf(t, id)).not.toContain(canary.secret)
    }, 120_000)
  })
}
