import { expect, test } from 'bun:test'
import { removeDataDir } from '../helpers/cleanup'
import { script, waitFor } from '../helpers/http'
import { client, seededDataDir, startServer } from '../helpers/server'
import { settled } from '../helpers/sessions'

/**
 * A stop with a turn paused on gVisor (frozen in memory) must not wait for that turn, which cannot
 * end while frozen; the next start ends it as lost, like a crash would, and whatever it left
 * running never runs on.
 */
test('a server stops, and starts again, with a turn paused on gVisor: the paused turn is lost as in a crash, nothing of it runs on, and the session takes a follow-up', async () => {
  const { dir, token } = await seededDataDir('agentd-paused-restart')
  const env = { DATA_DIR: dir, AGENTD_SANDBOX: 'gvisor' }
  let server = await startServer(env)
  try {
    const request = client(() => server, token)
    const read = async (id: string) => (await request('GET', `/o/acme/p/_/sessions/${id}`)).body
    const events = async (id: string) => ((await request('GET', `/o/acme/p/_/sessions/${id}/messages`)).body.events ?? []) as { type: string }[] // 404 before the first event
    const pauseWhen = async (id: string, ready: () => Promise<boolean>) => {
      await waitFor(ready, Boolean, 60_000)
      expect((await request('PATCH', `/o/acme/p/_/sessions/${id}`, { status: 'paused' })).status).toBe(202)
      await waitFor(() => read(id), (s) => s.machine_state === 'paused', 30_000)
    }
    // Paused while its shell call runs, which would write late.txt if it were let run on.
    // Claude Code: Codex on gVisor 2022 can stall under load on its own (docs/decisions.md).
    const inTool = (await request('POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script([{ bash: 'sleep 2 && echo late > late.txt' }, { answer: 'never' }]) })).body.execution_id as string
    await pauseWhen(inTool, async () => (await events(inTool)).some((e) => e.type === 'tool_use'))

    await server.stop() // SIGTERM: it must not wait for turns that cannot end while paused
    server = await startServer(env)
    expect(await read(inTool)).toMatchObject({ status: 'paused', turns_count: 1 })
    expect((await request('PATCH', `/o/acme/p/_/sessions/${inTool}`, { status: 'running' })).status).toBe(202)
    const after = await waitFor(() => read(inTool), (s) => s.status !== 'paused', 30_000)
    expect(after.status).toBe('failed')
    expect(after.error).toContain('agentd restarted')
    // The sandbox is the session's still: a follow-up runs in it, and the lost shell call never finished.
    expect((await request('POST', `/o/acme/p/_/sessions/${inTool}/messages`, { content: script([{ bash: 'sleep 3; ls' }, { answer: 'after' }]) })).status).toBe(200)
    const explain = async () =>
      `events: ${(await events(inTool)).map((e) => e.type).join(', ')}\nlogs: ${String((await request('GET', `/o/acme/p/_/sessions/${inTool}/logs`)).body.logs).slice(-2500)}\nserver: ${server.log().slice(-3000)}`
    const done = await settled(() => read(inTool), { turns: 2, timeoutMs: 60_000, explain })
    expect(done.status).toBe('completed')
    const listing = (await events(inTool)).filter((e) => e.type === 'tool_result').map((e) => (e as { output?: string }).output ?? '')
    expect(listing.at(-1)).not.toContain('late.txt')
  } finally {
    await server.stop()
    await removeDataDir(dir)
  }
}, 180_000)
