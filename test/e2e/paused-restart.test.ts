import { expect, test } from 'bun:test'
import { removeDataDir } from '../helpers/cleanup'
import { script, waitFor } from '../helpers/http'
import { client, seededDataDir, startServer } from '../helpers/server'
import { settled } from '../helpers/sessions'

/**
 * A graceful stop with a turn paused on gVisor (frozen in memory) must not wait for that turn,
 * which cannot end while frozen: it hands the turn over as it is, still frozen, and the next start
 * keeps it paused; resumed, the turn goes on where it stopped and completes.
 */
test('a server stops, and starts again, with a turn paused on gVisor: the session is still paused, and once resumed its turn goes on and completes', async () => {
  const { dir, token } = await seededDataDir('agentd-paused-restart')
  const env = { DATA_DIR: dir, AGENTD_SANDBOX: 'gvisor' }
  let server = await startServer(env)
  try {
    const request = client(() => server, token)
    const read = async (id: string) => (await request('GET', `/o/acme/p/_/sessions/${id}`)).body
    const events = async (id: string) =>
      ((await request('GET', `/o/acme/p/_/sessions/${id}/messages`)).body.events ?? []) as { type: string; output?: string }[] // 404 before the first event
    // Paused while its shell call runs; the call's file shows it ran on after the restart.
    // Claude Code: Codex on gVisor 2022 can stall under load on its own (docs/decisions.md).
    const inTool = (
      await request('POST', '/o/acme/p/_/sessions', {
        agent: 'harness_1',
        prompt: script([{ bash: 'sleep 2 && echo late > late.txt' }, { bash: 'cat late.txt' }, { answer: 'after' }]),
      })
    ).body.execution_id as string
    await waitFor(async () => (await events(inTool)).some((e) => e.type === 'tool_use'), Boolean, 60_000)
    expect((await request('PATCH', `/o/acme/p/_/sessions/${inTool}`, { status: 'paused' })).status).toBe(202)
    await waitFor(
      () => read(inTool),
      (s) => s.machine_state === 'paused',
      30_000,
    )

    await server.stop() // SIGTERM: it must not wait for a turn that cannot end while paused
    expect(server.log()).toContain('turn 1 handed over to the next server, its sandbox frozen')
    server = await startServer(env)
    expect(await read(inTool)).toMatchObject({ status: 'paused', turns_count: 0 })
    expect((await request('PATCH', `/o/acme/p/_/sessions/${inTool}`, { status: 'running' })).status).toBe(202)
    const explain = async () =>
      `events: ${(await events(inTool)).map((e) => e.type).join(', ')}\nlogs: ${String((await request('GET', `/o/acme/p/_/sessions/${inTool}/logs`)).body.logs).slice(-2500)}\nserver: ${server.log().slice(-3000)}`
    const done = await settled(() => read(inTool), { turns: 1, timeoutMs: 60_000, explain })
    expect(done.status, await explain()).toBe('completed')
    expect(done.sandbox_generation).toBeGreaterThan(0)
    // The shell call paused before the restart finished after it, and the next one read its file.
    const outputs = (await events(inTool)).filter((e) => e.type === 'tool_result').map((e) => e.output ?? '')
    expect(outputs.at(-1)).toContain('late')
  } finally {
    await server.stop()
    await removeDataDir(dir)
  }
}, 180_000)
