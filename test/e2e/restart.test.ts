import { removeDataDir } from '../helpers/cleanup'
import { afterAll, describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { join } from 'node:path'
import { readdirSync, readFileSync, readlinkSync } from 'node:fs'
import { script, waitFor } from '../helpers/http'
import { admin, client, seededDataDir, startServer } from '../helpers/server'
import { openSse, type SseFrame } from '../helpers/sse'

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await removeDataDir(dir) // with the sandbox disks a stopped server left mounted
})

/** Host processes whose command line or working directory mentions `needle`. */
function processesMentioning(needle: string): number[] {
  const found: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8')
      let cwd = ''
      try {
        cwd = readlinkSync(`/proc/${entry}/cwd`)
      } catch {}
      if (cmdline.includes(needle) || cwd.includes(needle)) found.push(Number(entry))
    } catch {}
  }
  return found
}

function commandLine(pid: number): string {
  try {
    return `${pid}: ${readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')}`
  } catch {
    return `${pid}: (gone)`
  }
}

for (const driver of ['default', 'process'] as const) {
  describe(`kill -9 during a turn (${driver} driver)`, () => {
    test('after a restart the session is failed with a restart error, its processes are gone, and no row is lost', async () => {
      const { dir, token } = await seededDataDir('agentd-restart')
      dirs.push(dir)
      const env = { DATA_DIR: dir, ...(driver === 'process' ? { AGENTD_SANDBOX: 'process' } : {}) }
      let server = await startServer(env)
      const request = client(() => server, token)
      const call = async (method: string, path: string, body?: unknown) => (await request(method, path, body)).body
      // On gVisor Claude Code: Codex there can stall under load on its own (docs/decisions.md).
      const agent = driver === 'default' ? 'harness_1' : 'harness_2'
      const finished = await call('POST', '/o/acme/p/_/sessions', { agent, prompt: 'first' })
      while ((await call('GET', `/o/acme/p/_/sessions/${finished.execution_id}`)).status !== 'completed') await Bun.sleep(50)

      const long = await call('POST', '/o/acme/p/_/sessions', { agent, prompt: script([{ sleep: 3000 }, { answer: 'late' }]) })
      const id = long.execution_id as string
      while ((await call('GET', `/o/acme/p/_/sessions/${id}`)).status !== 'running') await Bun.sleep(20)
      // Let the CLI get into its model call.
      await Bun.sleep(800)
      await waitFor(
        async () => processesMentioning(id).length,
        (n) => n > 0,
        20_000,
      )
      await server.stop('SIGKILL')

      server = await startServer(env)
      try {
        const after = await call('GET', `/o/acme/p/_/sessions/${id}`)
        expect(after.status).toBe('failed')
        expect(after.error).toContain('agentd restarted')
        const result = await call('GET', `/o/acme/p/_/sessions/${id}/result`)
        expect(result.output).toContain('agentd restarted')
        expect((await call('GET', `/o/acme/p/_/sessions/${finished.execution_id}`)).status).toBe('completed')
        const list = await call('GET', '/o/acme/p/_/sessions')
        expect(list.executions.map((s: { execution_id: string }) => s.execution_id).sort()).toEqual([finished.execution_id, id].sort())
        // Nothing of the lost turn keeps running: the sandbox is parked (gVisor: checkpointed, no process).
        // Parking runs agentd's own short-lived helpers (runsc checkpoint, then a delete of ~2 s) that
        // name the session after it reads failed, so what counts is a whole second with none.
        const deadline = Date.now() + 15_000
        let quietSince = Date.now()
        while (Date.now() - quietSince < 1_000 && Date.now() < deadline) {
          if (processesMentioning(id).length > 0) quietSince = Date.now()
          await Bun.sleep(50)
        }
        expect(processesMentioning(id).map(commandLine)).toEqual([])
      } finally {
        await server.stop()
      }
    })
  })
}

describe('kill -9 with five turns running (default driver)', () => {
  test('the new process answers /healthz before it has dealt with them; other requests wait for that, then see each turn failed', async () => {
    const { dir, token } = await seededDataDir('agentd-restart-five')
    dirs.push(dir)
    expect((await admin(dir, 'plan', 'set', '--org', 'acme', '--max-concurrent', '5')).code).toBe(0)
    let server = await startServer({ DATA_DIR: dir })
    const call = client(() => server, token)
    const ids: string[] = []
    try {
      // Codex: the cheapest CLI to boot inside gVisor; what is tested is the restart, not the harness.
      for (let i = 0; i < 5; i++)
        ids.push(
          (await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: script([{ sleep: 30_000 }]) })).body.execution_id,
        )
      const deadline = Date.now() + 40_000
      for (const id of ids) {
        while ((await call('GET', `/o/acme/p/_/sessions/${id}`)).body.status !== 'running' && Date.now() < deadline) await Bun.sleep(50)
      }
      await server.stop('SIGKILL')

      const spawned = performance.now()
      server = await startServer({ DATA_DIR: dir })
      const health = await fetch(`${server.url}/healthz`)
      const answeredMs = performance.now() - spawned
      // Five sandboxes to sweep and adopt are still ahead: the process is alive, not yet ready.
      expect(await health.json()).toEqual({ ok: true, ready: false, role: 'primary', node: expect.any(String), txid: 0 })
      // A request about a session, sent while not ready, waits for them instead of seeing a turn
      // nobody runs any more (the last one created, so likely the last one adopted). A wait past
      // READY_WAIT_MS (a loaded machine) is a 503 STARTING to retry, never the dead turn as running.
      let first = await call('GET', `/o/acme/p/_/sessions/${ids[4]}`)
      while (first.status === 503) {
        expect(first.body.code).toBe('STARTING')
        first = await call('GET', `/o/acme/p/_/sessions/${ids[4]}`)
      }
      expect(first.body).toMatchObject({ status: 'failed' })
      expect(first.body.error).toContain('agentd restarted')
      expect(await (await fetch(`${server.url}/healthz`)).json()).toEqual({
        ok: true,
        ready: true,
        role: 'primary',
        node: expect.any(String),
        txid: 0,
      })
      for (const id of ids) expect((await call('GET', `/o/acme/p/_/sessions/${id}`)).body.status).toBe('failed')
      console.log(
        `restart with 5 running turns: /healthz answered ${answeredMs.toFixed(0)} ms after the spawn; ${/agentd: ready[^\n]*/.exec(server.log())?.[0]}`,
      )
    } finally {
      await server.stop()
    }
  })
})

describe('across a restart (bwrap driver)', () => {
  test('an event stream resumes after the restart with Last-Event-ID: no gap, no duplicate, then done', async () => {
    const { dir, token } = await seededDataDir('agentd-restart-sse')
    dirs.push(dir)
    let server = await startServer({ DATA_DIR: dir, AGENTD_SANDBOX: 'bwrap' })
    try {
      const created = (
        await client(() => server, token)('POST', '/o/acme/p/_/sessions', {
          agent: 'harness_2',
          prompt: script([{ say: 'before' }, { sleep: 60_000 }, { answer: 'after' }]),
        })
      ).body as { execution_id: string }
      const url = (base: string) => `${base}/o/acme/p/_/sessions/${created.execution_id}/events`
      const first = await openSse(url(server.url), token)
      // Read up to the turn's start, then lose the server once the model's reply is under way: it
      // holds the rest of the reply for 60 s, so the turn is in the middle of it however loaded the
      // machine. (Codex prints the assistant's words only as its turn ends: waiting for them, with a
      // 3 s hold, once let the turn finish before the kill under a full suite.)
      const head: SseFrame[] = []
      while (!head.some((f) => f.event === 'status' && f.data?.status === 'running')) head.push(...(await first.frames(1)))
      const call = client(() => server, token)
      await waitFor(
        async () =>
          ((await call('GET', `/o/acme/p/_/sessions/${created.execution_id}/logs`)).body.logs as string)
            .split('\n')
            .filter((line) => / gateway: POST \S+$/.test(line)).length,
        (requests) => requests >= 1,
        30_000,
      )
      first.close()
      await server.stop('SIGKILL')
      server = await startServer({ DATA_DIR: dir, AGENTD_SANDBOX: 'bwrap' })
      const last = head.at(-1)!.id!
      const tail = await (await openSse(url(server.url), token, { 'last-event-id': String(last) })).frames()
      const ids = [...head, ...tail].filter((f) => f.id !== undefined).map((f) => f.id!)
      expect(new Set(ids).size).toBe(ids.length)
      expect(ids).toEqual([...ids].sort((a, b) => a - b))
      // Every event the stream shows, from the database file itself: log lines (the CLI's stderr,
      // the gateway's requests) take a number too but are read through …/logs, not the stream.
      const db = new Database(join(dir, 'agentd.db'), { readonly: true })
      const visible = db
        .query("SELECT seq FROM session_events WHERE session_id = ? AND kind != 'log' ORDER BY seq")
        .all(created.execution_id) as { seq: number }[]
      db.close()
      expect(ids).toEqual(visible.map((row) => row.seq))
      expect(tail.at(-1)!.event).toBe('done')
      expect(tail.at(-1)!.data.status).toBe('failed')
    } finally {
      await server.stop()
    }
  })

  test('queued follow-ups survive the restart and run as the next turns', async () => {
    const { dir, token } = await seededDataDir('agentd-restart-queue')
    dirs.push(dir)
    let server = await startServer({ DATA_DIR: dir, AGENTD_SANDBOX: 'bwrap' })
    const call = client(() => server, token)
    try {
      const id = (await call('POST', '/o/acme/p/_/sessions', { agent: 'harness_2', prompt: script([{ sleep: 5000 }]) })).body.execution_id
      while ((await call('GET', `/o/acme/p/_/sessions/${id}`)).body.status !== 'running') await Bun.sleep(20)
      expect((await call('POST', `/o/acme/p/_/sessions/${id}/messages`, { content: 'first queued' })).body.position).toBe(1)
      expect((await call('POST', `/o/acme/p/_/sessions/${id}/messages`, { content: 'second queued' })).body.position).toBe(2)
      await server.stop('SIGKILL')
      server = await startServer({ DATA_DIR: dir, AGENTD_SANDBOX: 'bwrap' })
      let session = (await call('GET', `/o/acme/p/_/sessions/${id}`)).body
      const deadline = Date.now() + 30_000
      while (!(session.status === 'completed' && session.turns_count === 3) && Date.now() < deadline) {
        await Bun.sleep(100)
        session = (await call('GET', `/o/acme/p/_/sessions/${id}`)).body
      }
      expect(session).toMatchObject({ status: 'completed', turns_count: 3, summary: 'Done: second queued' })
    } finally {
      await server.stop()
    }
  })
})
