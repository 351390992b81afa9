/**
 * Attack: the agent fills agentd's disk and memory through artifacts. A turn writes more artifact
 * bytes than AGENTD_ARTIFACTS_MAX_MB; turns rewrite one artifact again and again (each version's
 * blob would stay for ever); and a 1 GiB artifact is downloaded by 20 clients at once (each
 * download read the whole blob into memory). Contract section 11: one turn's artifacts total at
 * most AGENTD_ARTIFACTS_MAX_MB (the rest skipped, the logs say so); blobs go with what names them;
 * downloads stream.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { readdirSync } from 'node:fs'
import { join } from 'node:path'
import type { TestApp } from '../helpers/app'
import { caller, followUp, ISOLATING, quiesce, runSession, securityApp } from './helpers'

const MiB = 1024 * 1024
const GiB = 1024 * MiB

/** Blob files under DATA_DIR/blobs (temp files aside). */
function blobFiles(t: TestApp): string[] {
  const root = join(t.dir, 'blobs')
  let dirs: string[] = []
  try {
    dirs = readdirSync(root).filter((d) => !d.startsWith('.'))
  } catch {
    return []
  }
  return dirs.flatMap((d) => readdirSync(join(root, d)))
}

for (const kind of ISOLATING) {
  describe(`artifact volume on ${kind}`, () => {
    let t: TestApp
    beforeAll(async () => {
      t = await securityApp(kind, { AGENTD_ARTIFACTS_MAX_MB: '100' })
    }, 60_000)
    afterAll(async () => t?.[Symbol.asyncDispose](), 60_000)

    test('three artifacts of 40 MiB in one turn: the first two are kept, the third skipped and named in the logs', async () => {
      const write = [1, 2, 3]
        .map((i) => `head -c ${40 * MiB} /dev/zero | tr '\\0' ${i} > .agentd/artifacts/part-${i}.bin && sleep 0.05`)
        .join(' && ')
      const view = await runSession(t, [{ bash: `mkdir -p .agentd/artifacts && ${write}` }, { answer: 'written' }])
      expect(view.status).toBe('completed')
      const call = caller(t)
      const listed = (await call('GET', `/o/acme/p/_/sessions/${view.execution_id}/artifacts`)).body.artifacts
      expect(listed).toHaveLength(2)
      expect(listed.reduce((sum: number, a: { size: number }) => sum + a.size, 0)).toBeLessThanOrEqual(100 * MiB)
      const logs = (await call('GET', `/o/acme/p/_/sessions/${view.execution_id}/logs`)).body.logs as string
      expect(logs).toMatch(/agentd: 1 artifacts \(41943040 bytes\) not kept past AGENTD_ARTIFACTS_MAX_MB: part-\d\.bin/)
    }, 120_000)

    test('an artifact rewritten by four turns leaves one blob on disk, not four', async () => {
      const version = (n: number) => [
        { bash: `mkdir -p .agentd/artifacts && head -c ${MiB} /dev/urandom > .agentd/artifacts/report.bin` },
        { answer: `v${n}` },
      ]
      const before = blobFiles(t).length
      const view = await runSession(t, version(1))
      for (let turn = 2; turn <= 4; turn++) await followUp(t, view.execution_id, version(turn), turn)
      expect(blobFiles(t).length - before).toBe(1)
      const download = await t.app.handle(
        new Request(`http://localhost/o/acme/p/_/sessions/${view.execution_id}/artifacts/report.bin`, {
          headers: { authorization: `Bearer ${t.admin.token}` },
        }),
      )
      expect(download.status).toBe(200)
      expect((await download.arrayBuffer()).byteLength).toBe(MiB)
    }, 180_000)
  })
}

// The download is agentd's own doing, whatever the sandbox: shown once, on an app with the default cap.
describe('artifact downloads', () => {
  let t: TestApp
  beforeAll(async () => {
    t = await securityApp('bwrap')
  }, 60_000)
  afterAll(async () => t?.[Symbol.asyncDispose](), 60_000)

  test("a 1 GiB artifact downloaded by 20 clients at once: every byte arrives, the server's memory stays bounded", async () => {
    const big = await runSession(
      t,
      [{ bash: 'mkdir -p .agentd/artifacts && truncate -s 1G .agentd/artifacts/big.bin' }, { answer: 'big' }],
      {},
    )
    expect(big.status).toBe('completed')
    const url = t.listen()
    await quiesce()
    const rssBefore = process.memoryUsage().rss
    let rssPeak = rssBefore
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 20)
    try {
      const sizes = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const res = await fetch(`${url}/o/acme/p/_/sessions/${big.execution_id}/artifacts/big.bin`, {
            headers: { authorization: `Bearer ${t.admin.token}` },
          })
          let bytes = 0
          for await (const chunk of res.body!) bytes += chunk.byteLength
          return { status: res.status, bytes }
        }),
      )
      for (const s of sizes) expect(s).toEqual({ status: 200, bytes: GiB })
    } finally {
      clearInterval(sampler)
    }
    console.log(`20 downloads of 1 GiB on bwrap: the server's memory grew ${((rssPeak - rssBefore) / MiB).toFixed(0)} MiB at its peak`)
    expect(rssPeak - rssBefore).toBeLessThan(300 * MiB)
  }, 300_000)
})
