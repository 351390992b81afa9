import { afterAll, expect, test } from 'bun:test'
import { removeDataDir } from '../helpers/cleanup'
import { script } from '../helpers/http'
import { poll } from '../helpers/poll'
import { client, seededDataDir, startServer, type RunningServer } from '../helpers/server'

/**
 * The runsc agentd runs is named at start and in /metrics; Debian's build (2022, ptrace) stays
 * supported beside the one agentd prefers: a server told to use it (AGENTD_RUNSC) runs a resumable
 * session on it whose sandbox is parked between two turns and woken with its files.
 */
const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await removeDataDir(dir)
})

test("Debian's runsc, named by AGENTD_RUNSC: the log and /metrics say so; a session runs, parks and wakes on it", async () => {
  const seeded = await seededDataDir('agentd-runsc-compat')
  dirs.push(seeded.dir)
  const server: RunningServer = await startServer({
    DATA_DIR: seeded.dir,
    AGENTD_SANDBOX: 'gvisor',
    AGENTD_RUNSC: '/usr/bin/runsc',
    AGENTD_METRICS_TOKEN: 'compat-metrics',
  })
  const call = client(() => server, seeded.token)
  try {
    expect(server.log()).toContain('runsc 0.0~20221219.0 from AGENTD_RUNSC at /usr/bin/runsc, platform ptrace')
    const metrics = await (await fetch(`${server.url}/metrics`, { headers: { authorization: 'Bearer compat-metrics' } })).text()
    expect(metrics).toContain('agentd_runsc_info{version="0.0~20221219.0",platform="ptrace",source="AGENTD_RUNSC"} 1')
    const created = await call('POST', '/o/acme/p/_/sessions', {
      agent: 'harness_2',
      prompt: script([{ bash: 'echo kept > note.txt' }, { answer: 'written' }]),
    })
    expect(created.status).toBe(202)
    const id = created.body.execution_id as string
    let seen = ''
    const view = () =>
      call('GET', `/o/acme/p/_/sessions/${id}`).then((r) => {
        seen = `${r.body.status} ${r.body.error ?? ''}`
        return r.body
      })
    // Seen once under the whole suite's load: the first turn not over in 90 s (5.8 s alone); the
    // session's state and the server's last lines say where it stood.
    const last = () => `${seen}; server log: ${server.log().slice(-3000)}`
    await poll('the first turn to end', async () => (await view()).status === 'completed', { timeoutMs: 90_000, last })
    const follow = await call('POST', `/o/acme/p/_/sessions/${id}/messages`, {
      content: script([{ bash: 'cat note.txt' }, { answer: 'read' }]),
    })
    expect([200, 202]).toContain(follow.status)
    await poll('the second turn to end', async () => (await view()).turns_count === 2 && (await view()).status === 'completed', {
      timeoutMs: 90_000,
      last,
    })
    const calls = (await call('GET', `/o/acme/p/_/sessions/${id}/tool-calls`)).body
    expect(JSON.stringify(calls)).toContain('kept')
  } finally {
    await server.stop()
  }
}, 240_000)
