/**
 * Attack: Node's compile cache is shared by every session's Gemini CLI (V8 code for its bundle,
 * filled by agentd on the host). An agent that could write it would run its code in the next
 * session's CLI. The agent overwrites each cache file it can name, plants a new one and removes
 * the folder; nothing of it may change on the host. Then a Gemini CLI turn in another session,
 * started with the cache in its environment, completes (its time is in bench/turn.ts).
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import type { TestApp } from '../helpers/app'
import { geminiEntryPath } from '../../src/harness/gemini'
import { cliNode, fillNodeCompileCache, NODE_COMPILE_CACHE } from '../../src/harness/node-runtime'
import { caller, ISOLATING, runSession, script, securityApp, turnEnded } from './helpers'

/** Every file of the cache with its bytes. */
function cacheFiles(): Map<string, string> {
  const files = new Map<string, string>()
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) walk(path)
      else files.set(relative(NODE_COMPILE_CACHE, path), readFileSync(path).toString('base64'))
    }
  }
  walk(NODE_COMPILE_CACHE)
  return files
}

/**
 * Nothing of the cache as it was is changed, and nothing the agent planted is there. Entries the
 * host's own CLIs add meanwhile (other test files run Gemini CLI on the process driver, pinned
 * versions included, whose V8 writes its code for their bundles) are the host's, not the agent's.
 */
function expectUnharmed(before: Map<string, string>): void {
  const now = cacheFiles()
  expect([...before].filter(([path, bytes]) => now.get(path) !== bytes).map(([path]) => path)).toEqual([])
  expect([...now.keys()].filter((path) => path.startsWith('planted'))).toEqual([])
}

beforeAll(async () => {
  await fillNodeCompileCache(geminiEntryPath(), () => {})
})

test('agentd fills the cache on the host; the Gemini CLI is run on Node 22 with it', () => {
  expect(cacheFiles().size).toBeGreaterThan(0)
  expect(statSync(NODE_COMPILE_CACHE).mode & 0o022).toBe(0)
  const node = cliNode()
  expect(node.compileCache).toBe(NODE_COMPILE_CACHE)
  expect(Bun.spawnSync([node.path, '--version']).stdout.toString()).toStartWith('v22.')
})

for (const kind of ISOLATING) {
  describe(`${kind}: the shared compile cache`, () => {
    let t: TestApp
    beforeAll(async () => {
      t = await securityApp(kind)
    })
    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
    })

    test('an agent cannot overwrite, add to or remove it; the next Gemini CLI runs with it and completes', async () => {
      const before = cacheFiles()
      const attack = [
        `cd ${NODE_COMPILE_CACHE}`,
        'for f in $(find . -type f); do printf poisoned > "$f" && echo "WROTE $f"; done',
        'mkdir -p ./planted && printf x > ./planted/entry && echo PLANTED',
        `rm -rf ${NODE_COMPILE_CACHE} && echo REMOVED`,
        'echo attack-done',
      ].join('; ')
      const view = await runSession(t, [{ bash: attack }, { answer: 'tried' }])
      expect(view.status).toBe('completed')
      expectUnharmed(before)

      const call = caller(t)
      const created = await call('POST', '/o/acme/p/_/sessions', {
        agent: 'harness_3',
        prompt: script([{ bash: 'echo second-session' }, { answer: 'ran' }]),
      })
      expect(created.status).toBe(202)
      const second = await turnEnded(t, created.body.execution_id, 1, 90_000)
      expect(second.status).toBe('completed')
      expectUnharmed(before)
    }, 180_000)
  })
}
