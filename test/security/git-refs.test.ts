/**
 * Attack: git in the sandbox pushes, through agentd's git proxy and so with the installation's
 * token, to refs that are not its session's: a force-push over the default branch, a new branch,
 * another session's branch, a branch deleted, a tag pushed, a tag moved. Every one is refused
 * (git prints agentd's reason for each ref) and the code host's refs are as they were; the
 * session's own branch is accepted: the end-of-turn publish pushes it, and a later turn may
 * force-push it. Real Claude Code sessions on gVisor and on bwrap, against a git server behind the
 * GitHub App stand-in.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { TestApp } from '../helpers/app'
import type { GithubApp } from '../helpers/github-app'
import { script } from '../helpers/http'
import { caller, ISOLATING } from './helpers'
import { codeHost, hostGit, hostRefs, repositoryApp, runEnded, startRun, toolOutputs } from './repository-run'

/** Each attack's push, its output and its exit status (the next step's `git push` must not stop at a failure). */
const attempt = (push: string) => `${push} 2>&1; echo "exit=$?"`

const ATTACKS = [
  // A commit with no history in common with main, force-pushed over it.
  {
    name: 'force-push main',
    step: `git checkout -q --orphan evil && git commit -q --allow-empty -m evil && ${attempt('git push -f origin evil:main')}`,
  },
  { name: 'new branch', step: attempt('git push origin evil:refs/heads/feature') },
  { name: "another session's branch", step: attempt('git push origin evil:refs/heads/agentd/00000000') },
  { name: 'delete a branch', step: attempt('git push origin --delete release') },
  { name: 'push a tag', step: `git tag v2 evil && ${attempt('git push origin v2')}` },
  { name: 'move a tag', step: attempt('git push -f origin evil:refs/tags/v1') },
]

for (const kind of ISOLATING) {
  describe(`git pushes through agentd on ${kind}`, () => {
    let host: GithubApp
    let t: TestApp
    let before: Map<string, string>

    beforeAll(async () => {
      host = await codeHost()
      // A second branch and a tag the attacks aim at.
      hostGit(host, 'branch', 'release', 'main')
      hostGit(host, 'tag', 'v1', 'main')
      before = hostRefs(host)
      t = await repositoryApp(kind, host)
    }, 60_000)

    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
      host?.stop()
    }, 60_000)

    test("a force-push over main, another branch, a delete, a tag: each refused with agentd's reason, the code host untouched; the session's branch is published, and a later turn may force-push it", async () => {
      const id = await startRun(t, [
        ...ATTACKS.map(({ step }) => ({ bash: step })),
        // Back on main with a change: the end-of-turn publish pushes the session's branch.
        { bash: "git checkout -q main && printf 'changed by the turn\\n' >> README.md && echo back" },
        { answer: 'tried' },
      ])
      const view = await runEnded(t, id)
      expect(view.status, view.error).toBe('completed')
      const outputs = toolOutputs(t, id)
      const branch = `agentd/${id.slice(0, 8)}`
      for (const [i, { name }] of ATTACKS.entries()) {
        // git exits 1 and names agentd's reason for the ref.
        expect({ name, output: outputs[i] }).toEqual({
          name,
          output: expect.stringMatching(/\[remote rejected\][^\n]*agentd[\s\S]*exit=1\s*$/),
        })
      }
      console.log(`force-push over main on ${kind}, as git printed it:\n${outputs[0]}`)
      expect(outputs[0]).toContain(`only ${branch}`)

      // The code host's refs: as they were, and the session's branch, with the turn's change.
      const after = hostRefs(host)
      const own = `refs/heads/${branch}`
      expect(new Map([...after].filter(([ref]) => ref !== own))).toEqual(before)
      expect(hostGit(host, 'show', `${own}:README.md`)).toContain('changed by the turn')
      expect(hostGit(host, 'merge-base', '--is-ancestor', 'main', own)).toBe('')
      expect(host.github.pulls.get('acme/app')!.find((p) => p.head === branch)).toMatchObject({ base: 'main', state: 'open' })

      // A later turn: its own branch and another in one push, refused as a whole; then it rewinds its
      // own branch to main, a force-push of the session's branch being its own to make.
      const sent = await caller(t)('POST', `/o/acme/p/app/sessions/${id}/messages`, {
        content: script([
          { bash: `git commit -q --allow-empty -m more && ${attempt(`git push origin HEAD:refs/heads/${branch} HEAD:refs/heads/sneaky`)}` },
          { bash: `git reset -q --hard origin/main && ${attempt(`git push -f origin HEAD:refs/heads/${branch}`)}` },
          { answer: 'rewound' },
        ]),
      })
      expect(sent.status).toBe(200)
      const second = await runEnded(t, id, 2)
      expect(second.status, second.error).toBe('completed')
      const [mixed = '', rewound = ''] = toolOutputs(t, id).slice(-2)
      expect(mixed.match(/\[remote rejected\]/g)).toHaveLength(2)
      expect(mixed).toMatch(/\[remote rejected\][^\n]*sneaky[^\n]*agentd[\s\S]*exit=1\s*$/)
      expect(rewound).toMatch(/forced update[\s\S]*exit=0\s*$/)
      expect(hostRefs(host).get(own)).toBe(before.get('refs/heads/main'))
      expect(new Map([...hostRefs(host)].filter(([ref]) => ref !== own))).toEqual(before)
    }, 180_000)
  })
}
