/**
 * Attack: the end-of-turn publish (git add, commit and push, run by agentd in the sandbox's
 * checkout) made to run the sandbox's own programs. The repository's `.git` is the sandbox's: a
 * hook there, a `core.hooksPath`, `core.fsmonitor`, filter driver or `gpg.program` in its config
 * or in the home's, would run after the CLI has exited, with the turn's gateway key still valid.
 * A hook that prints forever must not fill agentd's memory, one that sleeps forever must not keep
 * the turn running past AGENTD_TURN_TIMEOUT_S; and a publish that stalls without any config (git
 * blocked on a FIFO planted where it reads its exclude file) is killed at the turn's deadline, the
 * turn failing as timed out. Throughout, /healthz answers and the server's thread never stalls
 * (bounded as output-flood.test.ts bounds it: every poll answered, and the server's thread never
 * busy for BUSY_BOUND_MS of CPU at a stretch, since on this shared 2-core machine the scheduler, not
 * agentd, decides wall-clock latencies). Real Claude Code sessions on gVisor and on bwrap, against
 * a git server behind the GitHub App stand-in; and agentd's reading of git's output on a sandbox of
 * each driver.
 */
import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { getPriority, setPriority } from 'node:os'
import type { TestApp } from '../helpers/app'
import type { GithubApp } from '../helpers/github-app'
import { waitFor } from '../helpers/http'
import { GIT_OUTPUT_CAP, GitDeadlineError, runGit } from '../../src/repositories/sandbox-git'
import { fakeGateway, specFor, tempRoot } from '../sandbox/helpers'
import { caller, expectResponsive, ISOLATING, quiesce, watchHealth, watchLoop } from './helpers'
import { codeHost, hostGit, hostRefs, repositoryApp, runEnded, startRun } from './repository-run'

/** The turns' deadline: long enough for a turn of a few steps on a loaded machine, short for the test. */
const TIMEOUT_S = 30
const MiB = 1024 * 1024
/** What agentd's memory may grow by while it publishes (contract section 11's attack bound). */
const MEMORY_BOUND = 100 * MiB

/** The change each attack's turn makes, so that the publish commits and pushes. */
const CHANGE = "printf 'changed by the turn\\n' >> README.md"

for (const kind of ISOLATING) {
  describe(`git at the end of a turn on ${kind}`, () => {
    let host: GithubApp
    let t: TestApp
    let url: string
    let priority = 0

    beforeAll(async () => {
      // agentd runs above its sandboxes: here the test process is agentd (see output-flood.test.ts).
      priority = getPriority()
      setPriority(-10)
      host = await codeHost()
      t = await repositoryApp(kind, host, { AGENTD_TURN_TIMEOUT_S: String(TIMEOUT_S) })
      url = t.listen()
    }, 60_000)

    afterAll(async () => {
      await t?.[Symbol.asyncDispose]()
      host?.stop()
      setPriority(priority)
    }, 60_000)

    /**
     * Runs a turn of `steps` and watches the server from the moment it runs to its end: its memory
     * (failing at once past MEMORY_BOUND, rather than waiting for the machine to run out), /healthz
     * from another process, and its thread. Resolves to the run's view and how long the turn ran.
     */
    async function watchedRun(label: string, steps: unknown[]): Promise<{ id: string; view: any; ranMs: number }> {
      const id = await startRun(t, [{ sleep: 500 }, ...steps])
      const call = caller(t)
      await waitFor(
        async () => (await call('GET', `/o/acme/p/app/sessions/${id}`)).body.status,
        (status) => status !== 'queued' && status !== 'allocating',
        60_000,
      )
      const running = Date.now()
      await quiesce()
      const rssBefore = process.memoryUsage().rss
      let rssPeak = rssBefore
      let overflow!: (err: Error) => void
      const overflowed = new Promise<never>((_, reject) => (overflow = reject))
      const sampler = setInterval(() => {
        rssPeak = Math.max(rssPeak, process.memoryUsage().rss)
        if (rssPeak - rssBefore > MEMORY_BOUND)
          overflow(new Error(`${label}: agentd's memory grew ${((rssPeak - rssBefore) / MiB).toFixed(0)} MiB while the turn ended`))
      }, 20)
      const health = watchHealth(url)
      await health.ready
      const loop = watchLoop()
      let view: any
      let stopped: Awaited<ReturnType<typeof health.stop>>
      try {
        view = await Promise.race([runEnded(t, id, 1, (TIMEOUT_S + 30) * 1000), overflowed])
      } finally {
        clearInterval(sampler)
        stopped = await health.stop()
      }
      const ranMs = Date.now() - running
      rssPeak = Math.max(rssPeak, process.memoryUsage().rss)
      console.log(
        `${label} on ${kind}: ${view.status} after ${(ranMs / 1000).toFixed(1)} s (${view.error ?? 'no error'}); memory grew ${((rssPeak - rssBefore) / MiB).toFixed(0)} MiB at its peak`,
      )
      expect(rssPeak - rssBefore).toBeLessThan(MEMORY_BOUND)
      expectResponsive(`${label} on ${kind}`, stopped, loop.stop())
      return { id, view, ranMs }
    }

    /** The turn's change reached the code host on the session's branch, and a pull request is open for it. */
    function expectPublished(id: string): void {
      const branch = `agentd/${id.slice(0, 8)}`
      const row = t.store.get(id)!
      expect(row.branch).toBe(branch)
      expect(hostRefs(host).has(`refs/heads/${branch}`)).toBe(true)
      expect(hostGit(host, 'show', `refs/heads/${branch}:README.md`)).toContain('changed by the turn')
      expect(host.github.pulls.get('acme/app')!.find((p) => p.head === branch)).toMatchObject({ base: 'main', state: 'open' })
    }

    test(
      "a pre-commit hook that prints forever: it never runs, agentd's memory stays flat, the turn completes and its change is published",
      async () => {
        const hook = `printf '#!/bin/sh\\nexec yes "a hook flooding agentd"\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit`
        const { id, view } = await watchedRun('printing hook', [{ bash: `${hook} && ${CHANGE} && echo planted` }, { answer: 'planted' }])
        expect(view.status, view.error).toBe('completed')
        expectPublished(id)
      },
      (TIMEOUT_S + 90) * 1000,
    )

    test(
      "hooks and programs that sleep forever, planted in the repository's config and the home's (core.hooksPath, core.fsmonitor, a required filter, gpg.program): none runs, the turn completes before its deadline and its change is published",
      async () => {
        const plant = [
          "mkdir -p ~/stall && printf '#!/bin/sh\\nexec sleep 3600\\n' > ~/stall/pre-commit && cp ~/stall/pre-commit ~/stall/pre-push && chmod +x ~/stall/*",
          'git config core.hooksPath ~/stall',
          'git config core.fsmonitor ~/stall/pre-commit',
          "git config filter.stall.clean 'sleep 3600' && git config filter.stall.required true && printf '* filter=stall\\n' > .git/info/attributes",
          'git config --global core.hooksPath ~/stall',
          'git config --global commit.gpgSign true && git config --global gpg.program ~/stall/pre-commit',
          CHANGE,
          'echo planted',
        ].join(' && ')
        const { id, view, ranMs } = await watchedRun('sleeping hooks', [{ bash: plant }, { answer: 'planted' }])
        expect(view.status, view.error).toBe('completed')
        expect(ranMs).toBeLessThan(TIMEOUT_S * 1000)
        expectPublished(id)
      },
      (TIMEOUT_S + 90) * 1000,
    )

    // No attack above reaches the output cap (no program of the sandbox's runs), so the reading
    // itself is shown here, on a sandbox of the same driver: what agentd's git prints is kept to
    // GIT_OUTPUT_CAP, whatever the volume; a run past its deadline is killed at once; output held
    // open by a process that left the group is not waited for.
    test("agentd's git runs: 300 MB of output read to 64 KiB each, memory flat; a run past its deadline killed at once; a daemon holding the output not waited for", async () => {
      await using root = tempRoot()
      using gateway = fakeGateway()
      const handle = await t.driver.create(specFor(root.path, crypto.randomUUID(), gateway.port))
      try {
        const env = { PATH: '/usr/bin:/bin' }
        await quiesce()
        const rssBefore = process.memoryUsage().rss
        let rssPeak = rssBefore
        const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 20)
        let flood: Awaited<ReturnType<typeof runGit>>
        try {
          flood = await runGit(
            t.driver,
            handle,
            ['/bin/sh', '-c', `yes out | head -c ${150 * MiB} & yes err | head -c ${150 * MiB} >&2; wait; exit 3`],
            env,
          )
        } finally {
          clearInterval(sampler)
        }
        console.log(
          `git output flood on ${kind}: exit ${flood.code}, kept ${flood.stdout.length} + ${flood.stderr.length} bytes; memory grew ${((rssPeak - rssBefore) / MiB).toFixed(0)} MiB at its peak`,
        )
        expect(flood.stdout.length).toBe(GIT_OUTPUT_CAP)
        expect(flood.stdout.startsWith('out\nout\n')).toBe(true)
        expect(flood.stderr.length).toBe(GIT_OUTPUT_CAP)
        expect(rssPeak - rssBefore).toBeLessThan(MEMORY_BOUND)

        const started = Date.now()
        await expect(
          runGit(t.driver, handle, ['/bin/sh', '-c', 'echo started; sleep 3600'], env, AbortSignal.timeout(1000)),
        ).rejects.toBeInstanceOf(GitDeadlineError)
        expect(Date.now() - started).toBeLessThan(5000)

        const daemon = await runGit(t.driver, handle, ['/bin/sh', '-c', 'setsid sleep 3600 & echo done'], env)
        expect(daemon).toEqual({ code: 0, stdout: 'done\n', stderr: '' })
      } finally {
        await t.driver.destroy(handle)
      }
    }, 120_000)

    test(
      "a publish that stalls with no config at all (a FIFO where git reads .git/info/exclude) is killed at the turn's deadline: the turn fails as timed out",
      async () => {
        const plant = `rm -f .git/info/exclude && mkfifo .git/info/exclude && ${CHANGE} && echo planted`
        const { id, view, ranMs } = await watchedRun('stalled publish', [{ bash: plant }, { answer: 'planted' }])
        expect(view.status).toBe('failed')
        expect(view.error).toBe(`the turn ran longer than ${TIMEOUT_S} s and was stopped`)
        // The CLI had finished (its answer is in the run): what the deadline stopped was the publish.
        expect(t.store.allEvents(id).some((e) => e.type === 'message' && e.data.role === 'assistant' && e.data.content === 'planted')).toBe(
          true,
        )
        // Ended at its deadline (counted from before its CLI started), not long after.
        expect(ranMs).toBeLessThan((TIMEOUT_S + 10) * 1000)
        expect(hostRefs(host).has(`refs/heads/agentd/${id.slice(0, 8)}`)).toBe(false)
      },
      (TIMEOUT_S + 90) * 1000,
    )
  })
}
