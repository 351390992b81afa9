import { beforeAll, describe, expect, test } from 'bun:test'
import { script, waitFor } from '../helpers/http'
import { type Region, regionSkip, useRegion } from './litefs-region'

/**
 * The region's primary lost, and a replica promoted by hand (a static lease: contract section 12;
 * with a Consul lease LiteFS moves it itself): the nodes whose role or LiteFS changed restart
 * themselves (exit 75), the new primary takes the actors over as after a restart, and the region
 * answers writes again.
 */
const skip = regionSkip()

describe.skipIf(skip !== null)('a region whose primary is lost', () => {
  const { region: current, call } = useRegion(3, { AGENTD_SANDBOX: 'bwrap' })
  let region: Region
  beforeAll(() => {
    region = current()
  })

  const run = (node: number, steps: unknown[]) => call(node, 'POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script(steps) })
  const statusOf = async (node: number, id: string) => (await call(node, 'GET', `/o/acme/p/_/sessions/${id}`)).body

  test('a replica promoted by hand: the region answers writes again within 30 s, what was written before is there, a new run completes', async () => {
    const finished = (await run(2, [{ answer: 'before the loss' }])).body.execution_id as string
    await waitFor(
      () => statusOf(2, finished),
      (s) => s.status === 'completed',
      60_000,
    )
    // A turn in the middle of its model reply when the primary (where it runs) is lost.
    const cut = (await run(1, [{ say: 'working' }, { sleep: 120_000 }, { answer: 'never' }])).body.execution_id as string
    await waitFor(
      () => statusOf(1, cut),
      (s) => s.status === 'running',
      60_000,
    )

    const lost = Date.now()
    await region.lose(0)
    // Writes have nowhere to go meanwhile, and say so; reads go on.
    expect((await run(2, [{ answer: 'x' }])).status).toBe(503)
    expect((await statusOf(2, finished)).status).toBe('completed')
    // The operator moves the lease: n2's LiteFS restarted as the candidate, n3's following it.
    expect(await region.promote(1)).toBe(75)
    expect(region.nodes[1]!.server.log()).toContain('node n2 of a region')
    expect(await region.follow(2, 1)).toBe(75)
    const health = (await (await fetch(`${region.nodes[2]!.url}/healthz`)).json()) as { role: string }
    expect(health.role).toBe('replica')
    const after = await run(2, [{ answer: 'after the promotion' }])
    expect(after.status).toBe(202)
    const back = Date.now() - lost
    expect(back).toBeLessThan(30_000)
    console.log(`region answered writes again ${back} ms after its primary was lost`)

    // The new primary took the actors over as after a restart: the turn cut with n1 failed, its
    // sandbox lost with that node; the finished session is as it was, until it needs its sandbox.
    expect(await statusOf(1, cut)).toMatchObject({ status: 'failed', error: 'node lost: n1' })
    expect((await statusOf(1, finished)).status).toBe('completed')
    expect((await call(2, 'POST', `/o/acme/p/_/sessions/${finished}/messages`, { content: script([{ answer: 'again' }]) })).status).toBe(
      200,
    )
    const followed = await waitFor(
      () => statusOf(2, finished),
      (s) => s.status === 'failed',
      30_000,
    )
    expect(followed.error).toContain('node lost: n1')
    const done = await waitFor(
      () => statusOf(2, after.body.execution_id),
      (s) => s.status === 'completed' || s.status === 'failed',
      60_000,
    )
    expect(done.status).toBe('completed')
  }, 180_000)
})
