/**
 * Artifact collection at the end of a turn (issue "The sandbox holds"): `ArtifactStore.collect`,
 * which walks the sandbox's artifacts folder through directory fds without following links, against
 * the way it was collected before (`readdirSync` recursion and `readFileSync`, which follow links),
 * kept here as the reference. Both run on the same tree of 200 files of 16 KiB in one process,
 * alternating, into a fresh database (rows included) and blob folder per round. Prints p50s and their ratio; figures only.
 */
import { createHash } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { sql } from 'drizzle-orm'
import { openDb, type Db } from '../src/db/client'
import { artifacts } from '../src/db/schema'
import { ARTIFACTS_DIR, ArtifactStore } from '../src/runtime/artifacts'

const FILES = 200
const SIZE = 16 * 1024
const ROUNDS = 40

const dir = mkdtempSync(join(tmpdir(), 'agentd-bench-artifacts-'))
const workspace = join(dir, 'workspace')
for (let i = 0; i < FILES; i++) {
  const sub = join(workspace, ARTIFACTS_DIR, i % 4 === 0 ? `folder-${i % 3}` : '')
  mkdirSync(sub, { recursive: true })
  writeFileSync(join(sub, `file-${i}.txt`), Buffer.alloc(SIZE, i % 251))
}

/** The collection before host-fs: what the old `collect` did to read and store the files. */
function plainCollect(db: Db, sessionId: string, root: string, blobs: string): number {
  const list = (at: string): string[] =>
    readdirSync(at, { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? list(join(at, e.name)) : e.isFile() ? [join(at, e.name)] : [],
    )
  const files = existsSync(root) ? list(root) : []
  let count = 0
  const writes: (() => void)[] = []
  for (const path of files) {
    const name = relative(root, path)
    statSync(path) // the old code ordered by mtime too
    const bytes = readFileSync(path)
    const sha256 = createHash('sha256').update(bytes).digest('hex')
    const blobDir = join(blobs, sha256.slice(0, 2))
    const blob = join(blobDir, sha256)
    if (!existsSync(blob)) {
      mkdirSync(blobDir, { recursive: true })
      writeFileSync(`${blob}.tmp`, bytes)
      renameSync(`${blob}.tmp`, blob)
    }
    const values = {
      sessionId,
      name,
      ordinal: count++,
      createdAt: 0,
      size: bytes.length,
      contentType: Bun.file(path).type.split(';')[0] || 'application/octet-stream',
      sha256,
      turn: 1,
      updatedAt: 0,
    }
    writes.push(() => db.insert(artifacts).values(values).run())
  }
  db.transaction(() => writes.forEach((w) => w()))
  return count
}

const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const safe: number[] = []
const plain: number[] = []
for (let round = 0; round < ROUNDS; round++) {
  const data = join(dir, `data-${round}`)
  mkdirSync(data)
  const { db, close } = openDb(join(data, 'agentd.db'))
  // The rows name sessions this bench never makes: the measure is the files and their rows, not the FK.
  db.run(sql.raw('PRAGMA foreign_keys = OFF'))
  const store = new ArtifactStore(db, data, Date.now)
  let t0 = performance.now()
  const count = store.collect(crypto.randomUUID(), workspace, 1).count
  safe.push(performance.now() - t0)
  t0 = performance.now()
  const plainCount = plainCollect(db, crypto.randomUUID(), join(workspace, ARTIFACTS_DIR), join(data, 'plain-blobs'))
  plain.push(performance.now() - t0)
  close()
  if (count !== FILES || plainCount !== FILES) throw new Error(`collected ${count} and ${plainCount} of ${FILES} files`)
  rmSync(data, { recursive: true, force: true })
}
rmSync(dir, { recursive: true, force: true })

console.log(`artifact collection, ${FILES} files of ${SIZE / 1024} KiB, ${ROUNDS} rounds each, alternating`)
console.log(`  collect (fd walk, no links)                          p50 ${p50(safe).toFixed(1)} ms`)
console.log(`  the old way (readdir + readFile, following links)   p50 ${p50(plain).toFixed(1)} ms`)
console.log(`  ratio collect / old way                             ${(p50(safe) / p50(plain)).toFixed(2)}x`)
