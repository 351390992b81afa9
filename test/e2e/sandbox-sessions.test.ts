import { removeDataDir } from '../helpers/cleanup'
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { script } from '../helpers/http'
import { client, seededDataDir, startServer, type RunningServer } from '../helpers/server'
import { settled } from '../helpers/sessions'

/**
 * Sessions on the real isolating drivers, through a real server: what a turn leaves in its
 * sandbox is there in the next turn after a park and a wake.
 */
for (const driver of ['gvisor', 'bwrap'] as const) {
  describe(`a resumable session on ${driver}`, () => {
    let dir: string
    let server: RunningServer
    let call: ReturnType<typeof client>
    let token: string
    beforeAll(async () => {
      const seeded = await seededDataDir(`agentd-${driver}`)
      dir = seeded.dir
      server = await startServer({ DATA_DIR: dir, AGENTD_SANDBOX: driver })
      token = seeded.token
      call = client(() => server, token)
    })
    afterAll(async () => {
      await server.stop()
      await removeDataDir(dir) // with the sandbox disks the stopped server left mounted
    })

    const session = (id: string) => call('GET', `/o/acme/p/_/sessions/${id}`).then((r) => r.body)
    /** What a turn that does not end got to: its events and its log (status changes, the gateway's requests, stderr). */
    const explain = async (id: string) => {
      const events = (await call('GET', `/o/acme/p/_/sessions/${id}/messages`)).body?.events ?? []
      const logs = (await call('GET', `/o/acme/p/_/sessions/${id}/logs`)).body?.logs ?? ''
      return `events: ${events.map((e: { type: string; role?: string }) => [e.type, e.role].filter(Boolean).join(':')).join(', ')}\nlogs: ${String(logs).slice(-2500)}`
    }
    const turnsDone = (id: string, turns: number) => settled(() => session(id), { turns, timeoutMs: 40_000, explain: () => explain(id) })
    /** The output of the turn's shell calls, from the transcript. */
    async function shellOutput(id: string, turn: number): Promise<string> {
      const { body } = await call('GET', `/o/acme/p/_/sessions/${id}/messages?last=1`)
      expect(turn).toBeGreaterThan(0)
      return body.events
        .filter((e: { type: string }) => e.type === 'tool_result')
        .map((e: { output?: string }) => e.output ?? '')
        .join('\n')
    }

    test('a file written in turn 1 is there in turn 2, after a park and a wake; the generation went up', async () => {
      const background =
        driver === 'gvisor'
          ? // Each count is written aside and renamed over the last: a read never meets a file the shell just truncated.
            " && (setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > count.new; mv count.new count; sleep 0.1; done' </dev/null >/dev/null 2>&1 &) && sleep 1 && cat count"
          : ''
      const created = await call('POST', '/o/acme/p/_/sessions', {
        // On gVisor Claude Code: Codex there can stall under load on its own (docs/decisions.md).
        agent: driver === 'gvisor' ? 'harness_1' : 'harness_2',
        prompt: script([{ bash: `echo kept > kept.txt${background}` }, { answer: 'turn one' }]),
      })
      const id = created.body.execution_id as string
      const first = await turnsDone(id, 1)
      expect(first.status).toBe('completed')
      expect(first.machine_state).toBe('paused')
      const before = first.sandbox_generation as number
      const counted = Number((await shellOutput(id, 1)).trim().split('\n').at(-1))

      await Bun.sleep(1500)
      const sent = await call('POST', `/o/acme/p/_/sessions/${id}/messages`, {
        content: script([
          { bash: driver === 'gvisor' ? 'cat kept.txt; cat count; sleep 1; cat count' : 'cat kept.txt' },
          { answer: 'turn two' },
        ]),
      })
      expect(sent.status).toBe(200)
      const second = await turnsDone(id, 2)
      expect(second.status).toBe('completed')
      expect(second.sandbox_generation).toBe(before + 1)
      const lines = (await shellOutput(id, 2)).trim().split('\n')
      expect(lines[0]).toBe('kept')
      if (driver === 'gvisor') {
        // The counter started in turn 1 kept its memory through the checkpoint and counts on.
        const [atWake, later] = [Number(lines[1]), Number(lines[2])]
        expect(atWake).toBeGreaterThanOrEqual(counted)
        expect(later).toBeGreaterThan(atWake)
      }
    })

    test('shape B: a document block and an uploaded file are in the attachments folder when turn 1 runs', async () => {
      const form = new FormData()
      form.append('file', new File(['id,value\n7,seven\n'], 'data.csv', { type: 'text/csv' }))
      const uploaded = (await (
        await fetch(`${server.url}/o/acme/files`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: form })
      ).json()) as { id: string }
      const document = {
        type: 'document',
        name: 'notes.txt',
        source: { type: 'base64', media_type: 'text/plain', data: Buffer.from('remember the milk\n').toString('base64') },
      }
      const created = await call('POST', '/o/acme/p/_/sessions', {
        harness: 'harness_1',
        input: [
          { type: 'text', text: script([{ bash: 'cat .agentd/attachments/notes.txt .agentd/attachments/data.csv' }, { answer: 'read' }]) },
          document,
          { type: 'file', source: { type: 'file', file_id: uploaded.id } },
        ],
      })
      expect(created.status).toBe(202)
      const id = created.body.execution_id as string
      const done = await turnsDone(id, 1)
      expect(done.status).toBe('completed')
      expect(done.attachments.map((a: { name: string; size: number }) => [a.name, a.size])).toEqual([
        ['notes.txt', 18],
        ['data.csv', 17],
      ])
      expect(await shellOutput(id, 1)).toContain('remember the milk\nid,value\n7,seven')
    })
  })
}
