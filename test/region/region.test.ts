import { beforeAll, describe, expect, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { join } from 'node:path'
import { script, waitFor } from '../helpers/http'
import { openSse } from '../helpers/sse'
import { type Region, regionSkip, startRegion, useRegion } from './litefs-region'

/**
 * A region (contract section 12) as the README's walk-through runs it: three nodes on this machine,
 * each its own LiteFS mount (static lease, n1 primary) and agentd, bwrap sandboxes. A replica serves
 * reads from LiteFS's copy and forwards writes to the primary, answering once it has the write.
 */
const skip = regionSkip()

describe.skipIf(skip !== null)('a region of three nodes on LiteFS', () => {
  const metricsToken = 'm'.repeat(40)
  const { region: current, call } = useRegion(3, {
    AGENTD_SANDBOX: 'bwrap',
    AGENTD_METRICS_TOKEN: metricsToken,
    AGENTD_NODE_TIMEOUT_S: '6',
  })
  let region: Region
  beforeAll(() => {
    region = current()
  })

  test('/healthz on each node: n1 is the primary, n2 and n3 replicas, each with its name and the TXID it has', async () => {
    const health: any[] = await Promise.all(region.nodes.map(async (node) => (await fetch(`${node.url}/healthz`)).json()))
    expect(health.map((h) => [h.node, h.role])).toEqual([
      ['n1', 'primary'],
      ['n2', 'replica'],
      ['n3', 'replica'],
    ])
    for (const h of health) expect(h.txid).toBeGreaterThan(0)
    // Each node recorded where it answers, through the primary; read from a replica's copy.
    const db = new Database(join(region.nodes[2]!.mount, 'agentd.db'), { readonly: true })
    try {
      const rows = db.query('SELECT name, url, primary_since FROM nodes ORDER BY name').all() as {
        name: string
        url: string
        primary_since: number | null
      }[]
      expect(rows.map((r) => [r.name, r.url, r.primary_since !== null])).toEqual(region.nodes.map((n, i) => [n.name, n.url, i === 0]))
    } finally {
      db.close()
    }
  })

  test('a create sent to a replica runs; a GET on every node right after sees it; its Idempotency-Key retried on another node answers the same session', async () => {
    const body = { agent: 'harness_1', prompt: script([{ say: 'from a replica' }, { answer: 'done' }]) }
    const created = await call(1, 'POST', '/o/acme/p/_/sessions', body, { 'idempotency-key': 'region-create-1' })
    expect(created.status).toBe(202)
    const id = created.body.execution_id as string
    expect(created.headers.get('x-agentd-txid')).toBeNull() // between nodes only
    // Read your writes: answered only once n2 had the transaction, and n3 and n1 had it no later.
    for (const node of [1, 2, 0]) expect((await call(node, 'GET', `/o/acme/p/_/sessions/${id}`)).status).toBe(200)
    const again = await call(2, 'POST', '/o/acme/p/_/sessions', body, { 'idempotency-key': 'region-create-1' })
    expect(again.body.execution_id).toBe(id)
    const listed = await call(2, 'GET', '/o/acme/p/_/sessions')
    expect(listed.body.executions.filter((s: { execution_id: string }) => s.execution_id === id)).toHaveLength(1)
    // The run itself completes (on the primary's sandboxes, for now), seen from a replica.
    const done = await waitFor(
      async () => (await call(2, 'GET', `/o/acme/p/_/sessions/${id}`)).body,
      (view) => view.status === 'completed' || view.status === 'failed',
      60_000,
    )
    expect(done.status).toBe('completed')
  }, 90_000)

  test('an event stream opened on a replica follows a run from its start to done: every event once, in order', async () => {
    const steps = Array.from({ length: 6 }, (_, i) => [{ say: `step ${i}` }, { sleep: 100 }]).flat()
    const created = await call(1, 'POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: script([...steps, { answer: 'done' }]) })
    expect(created.status).toBe(202)
    const stream = await openSse(`${region.nodes[2]!.url}/o/acme/p/_/sessions/${created.body.execution_id}/events`, region.adminToken)
    expect(stream.status).toBe(200)
    const frames = await stream.frames()
    expect(frames.at(-1)?.event).toBe('done')
    const ids = frames.filter((f) => f.id !== undefined).map((f) => f.id!)
    expect(ids).toEqual([...new Set(ids)].sort((a, b) => a - b))
    const said = JSON.stringify(frames.map((f) => f.data))
    for (let i = 0; i < 6; i++) expect(said).toContain(`step ${i}`)
    // The same events as the primary's own stream of the finished session.
    const onPrimary = await (
      await openSse(`${region.nodes[0]!.url}/o/acme/p/_/sessions/${created.body.execution_id}/events`, region.adminToken)
    ).frames()
    expect(onPrimary.filter((f) => f.id !== undefined).map((f) => f.id)).toEqual(ids)
  }, 60_000)

  test('a write with a bad credential sent to a replica gets the primary’s own 401, and nothing is made', async () => {
    const before = (await call(0, 'GET', '/o/acme/p/_/sessions')).body.executions.length
    const res = await fetch(`${region.nodes[2]!.url}/o/acme/p/_/sessions`, {
      method: 'POST',
      headers: { authorization: 'Bearer nope', 'content-type': 'application/json' },
      body: JSON.stringify({ agent: 'harness_1', prompt: 'hi' }),
    })
    expect(res.status).toBe(401)
    expect(((await res.json()) as any).code).toBe('AUTH_FAILED')
    expect((await call(0, 'GET', '/o/acme/p/_/sessions')).body.executions.length).toBe(before)
  })

  test('a heartbeat without the cluster token is refused on every node, with the token a replica refuses it too (only the primary records nodes)', async () => {
    const beat = { name: 'intruder', url: 'http://127.0.0.1:1', maxSandboxes: 100 }
    for (const node of [0, 1]) {
      const res = await fetch(`${region.nodes[node]!.url}/_region/beat`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-agentd-cluster-token': 'x'.repeat(64) },
        body: JSON.stringify(beat),
      })
      expect(res.status).toBe(401)
    }
    const toReplica = await fetch(`${region.nodes[1]!.url}/_region/beat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-agentd-cluster-token': region.clusterToken },
      body: JSON.stringify(beat),
    })
    expect(toReplica.status).toBe(503)
  })

  test('the primary’s address cannot be taken over: a beat naming the primary, sent to a replica under any spelling of the route or to the primary with the token, is refused and changes nothing', async () => {
    const primaryRow = () => {
      const db = new Database(join(region.nodes[0]!.mount, 'agentd.db'), { readonly: true })
      try {
        return db.query("SELECT url FROM nodes WHERE name = 'n1'").get() as { url: string }
      } finally {
        db.close()
      }
    }
    const hijack = { name: 'n1', url: 'http://127.0.0.1:9', maxSandboxes: 1000 }
    // A replica would have forwarded these with its own token before.
    for (const path of ['/_region/beat/', '/_region/beat//', '/_region//beat', '/_region/beat?x=1']) {
      const res = await fetch(`${region.nodes[1]!.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(hijack),
      })
      expect([401, 404]).toContain(res.status)
    }
    // Even a node cannot speak for the primary, nor pass on a beat forwarded to it.
    const asNode = { 'content-type': 'application/json', 'x-agentd-cluster-token': region.clusterToken }
    const named = await fetch(`${region.nodes[0]!.url}/_region/beat`, { method: 'POST', headers: asNode, body: JSON.stringify(hijack) })
    expect(named.status).toBe(400)
    const relayed = await fetch(`${region.nodes[0]!.url}/_region/beat`, {
      method: 'POST',
      headers: { ...asNode, 'x-agentd-forwarded-by': 'n2' },
      body: JSON.stringify({ ...hijack, name: 'n2' }),
    })
    expect(relayed.status).toBe(401)
    expect(primaryRow().url).toBe(region.nodes[0]!.url)
  })

  test('an API key reads through a replica (its use is recorded on the primary only)', async () => {
    const key = await call(0, 'POST', '/o/acme/api-keys', { name: 'reader' })
    expect(key.status).toBe(201)
    for (const node of [1, 2, 1]) {
      const res = await fetch(`${region.nodes[node]!.url}/o/acme/p/_/sessions`, { headers: { authorization: `Bearer ${key.body.secret}` } })
      expect(res.status).toBe(200)
    }
  })

  test('/metrics on every node lists the region’s nodes; a replica killed (agentd and LiteFS) is lost within AGENTD_NODE_TIMEOUT_S, the others stay up', async () => {
    const metrics = async (node: number) =>
      (await fetch(`${region.nodes[node]!.url}/metrics`, { headers: { authorization: `Bearer ${metricsToken}` } })).text()
    const up = (text: string, node: string) => new RegExp(`^agentd_region_node_up\\{node="${node}"\\} (\\d)$`, 'm').exec(text)?.[1]
    for (const node of [0, 1, 2]) {
      const text = await metrics(node)
      expect(['n1', 'n2', 'n3'].map((name) => up(text, name))).toEqual(['1', '1', '1'])
      expect(text).toMatch(/^agentd_region_node_sandboxes_max\{node="n2"\} \d+$/m)
    }
    await region.lose(2)
    const seen = await waitFor(
      () => metrics(0),
      (text) => up(text, 'n3') === '0',
      20_000,
    )
    expect([up(seen, 'n1'), up(seen, 'n2')]).toEqual(['1', '1'])
    const onReplica = await metrics(1)
    expect(['n1', 'n2', 'n3'].map((name) => up(onReplica, name))).toEqual(['1', '1', '0'])
  }, 30_000)

  test('with the primary’s agentd down, a replica still serves reads, and a write gets a clear 503 it can retry', async () => {
    const listed = (await call(1, 'GET', '/o/acme/p/_/sessions')).body.executions.length
    await region.nodes[0]!.server.stop()
    expect((await call(1, 'GET', '/o/acme/p/_/sessions')).body.executions.length).toBe(listed)
    const refused = await call(1, 'POST', '/o/acme/p/_/sessions', { agent: 'harness_1', prompt: 'hi' })
    expect(refused.status).toBe(503)
    expect(refused.body.code).toBe('PRIMARY_UNAVAILABLE')
    expect(refused.body.error).toContain(region.nodes[0]!.url)
  })
})

describe.skipIf(skip !== null)('Litestream and LiteFS', () => {
  test('AGENTD_LITESTREAM_URL on a node whose database is in a LiteFS mount stops the start with why (Litestream cannot work there)', async () => {
    const started = await startRegion(1, { AGENTD_SANDBOX: 'bwrap', AGENTD_LITESTREAM_URL: 'file:///tmp/agentd-never-replicated' }).then(
      async (region) => {
        await region[Symbol.asyncDispose]()
        return 'started'
      },
      (err: Error) => err.message,
    )
    expect(started).toContain('AGENTD_LITESTREAM_URL cannot replicate a database in a LiteFS mount')
    expect(started).toContain('litefs export')
  }, 60_000)
})
