import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { makeTestApp, type TestApp } from '../helpers/app'
import type { GitServer } from '../helpers/git-server'
import { startGithubApp, type GithubApp } from '../helpers/github-app'
import type { GithubStandin } from '../helpers/github-standin'
import { json, req, script, waitFor } from '../helpers/http'
import { adminWith } from '../helpers/server'

/**
 * A Project's run starts in a checkout of the Project's repository. git runs inside the sandbox and
 * reaches the code host only through agentd's gateway (`/git/<owner>/<name>.git`), with the turn's
 * gateway key; agentd sends it on with an installation token of its GitHub App, scoped to that
 * repository only. The code host here is Debian's `git http-backend` (smart HTTP), which takes
 * only the stand-in's installation tokens, each for the repositories it was scoped to.
 */
const INSTALLATION = 101
let host: GithubApp
let git: GitServer
let github: GithubStandin
beforeAll(async () => {
  host = await startGithubApp()
  ;({ git, github } = host)
  git.repo('acme', 'app', { 'README.md': 'hello from the repository\n', 'src/main.txt': 'main\n' })
  git.repo('acme', 'other', { 'SECRET.md': "not this session's\n" })
  // The App is installed on acme for acme/app (and acme/other, which no run of Project app may reach).
  github.installations.set(INSTALLATION, { account: 'acme', repositories: ['acme/app', 'acme/other'], suspended: false })
})
afterAll(() => host.stop())

for (const driver of ['bwrap', 'gvisor'] as const) {
  describe(`a Project run on ${driver}`, () => {
    let t: TestApp
    /** Every line the server logged, with its fields. */
    const logs: string[] = []
    beforeAll(async () => {
      t = await makeTestApp(
        { AGENTD_SANDBOX: driver, ...host.env },
        { log: (line, fields) => logs.push(`${line} ${JSON.stringify(fields ?? {})}`) },
      )
      // The operator links the org's installation, as GitHub confirms it, with the admin CLI.
      const linked = await adminWith(host.env, t.dir, 'github', 'link', '--org', 'acme', '--installation', String(INSTALLATION))
      expect(linked.json, linked.stderr).toMatchObject({ installation_id: INSTALLATION, account: 'acme' })
      t.identity.createProject('acme', 'app', 'acme/app')
    })
    /** No installation token and not the App's key, anywhere in `where`. */
    const secretsIn = (where: string) =>
      [...github.tokens.keys(), host.privateKey.split('\n')[1]!].filter((secret) => where.includes(secret))
    afterAll(() => t?.[Symbol.asyncDispose]())

    const settled = (id: string, turns = 1) =>
      waitFor(
        async () => t.store.get(id)!,
        (row) => row.turnsCount >= turns && !['queued', 'allocating', 'running'].includes(row.status),
        90_000,
      )
    const run = async (project: string, steps: unknown[], extra: Record<string, unknown> = {}) => {
      const res = await t.app.handle(
        req('POST', `/o/acme/p/${project}/sessions`, {
          token: t.admin.token,
          body: { agent: 'harness_1', prompt: script(steps), ...extra },
        }),
      )
      expect(res.status).toBe(202)
      const id = (await json(res)).execution_id as string
      const done = await settled(id)
      const outputs = t.store
        .allEvents(id)
        .filter((e) => e.type === 'tool_result')
        .map((e) => String(e.data.output ?? ''))
      return { id, row: done, outputs }
    }
    /** A session of the first test whose pull request is open, for the unlinked-installation check. */
    let published: { id: string; prUrl: string } | null = null
    const changes = async (id: string, project = 'app') =>
      json(await t.app.handle(req('GET', `/o/acme/p/${project}/sessions/${id}/changes`, { token: t.admin.token })))

    test('a turn that edits the checkout ends with a branch pushed and a pull request opened; changes lists its files; the next turn adds to the same pull request', async () => {
      const { id, row } = await run('app', [
        { write: { path: 'NOTES.md', content: 'a note\n' } },
        { bash: "printf 'changed\\n' >> README.md" },
        { answer: 'edited' },
      ])
      expect(row.status, `${row.error}`).toBe('completed')
      expect(row.branch).toBe(`agentd/${id.slice(0, 8)}`)
      const pull = github.pulls.get('acme/app')!.find((p) => p.head === row.branch)!
      expect(pull).toMatchObject({ base: 'main', state: 'open' })
      expect(row.prUrl).toBe(`https://github.example/acme/app/pull/${pull.number}`)
      const first = await changes(id)
      expect(first).toMatchObject({
        pr_url: row.prUrl,
        pr_number: pull.number,
        totals: { files: 2, additions: 2, deletions: 0, changes: 2 },
      })
      expect(first.files.map((f: { filename: string; status: string }) => [f.filename, f.status])).toEqual([
        ['NOTES.md', 'added'],
        ['README.md', 'modified'],
      ])
      expect(first.files[1].patch).toContain('+changed')
      // files_produced: the files the run's branch changes, as its pull request lists them.
      const view = async (session: string) =>
        json(await t.app.handle(req('GET', `/o/acme/p/app/sessions/${session}`, { token: t.admin.token })))
      expect((await view(id)).files_produced).toBe(2)
      published = { id, prUrl: row.prUrl! }
      // The rest (follow-ups, on_pr, the code host down) is agentd's own doing: shown on bubblewrap alone.
      if (driver !== 'bwrap') return
      // A follow-up's changes go to the same branch and pull request.
      const followUp = await t.app.handle(
        req('POST', `/o/acme/p/app/sessions/${id}/messages`, {
          token: t.admin.token,
          body: { content: script([{ bash: 'rm NOTES.md' }, { answer: 'removed' }]) },
        }),
      )
      expect(followUp.status).toBe(200)
      expect((await settled(id, 2)).status).toBe('completed')
      expect(github.pulls.get('acme/app')!.filter((p) => p.head === row.branch)).toHaveLength(1)
      const second = await changes(id)
      expect(second.files.map((f: { filename: string }) => f.filename)).toEqual(['README.md'])
      expect((await view(id)).files_produced).toBe(1)
      // Attack: a turn plants a link where the next turn's git config goes, at a host file. The
      // next turn's config replaces the link in the sandbox's home; the host file is untouched.
      const target = join(t.dir, 'host-file-the-sandbox-must-not-write')
      writeFileSync(target, 'host content\n')
      const plant = await t.app.handle(
        req('POST', `/o/acme/p/app/sessions/${id}/messages`, {
          token: t.admin.token,
          body: { content: script([{ bash: `ln -sfn ${target} ~/.gitconfig` }, { answer: 'planted' }]) },
        }),
      )
      expect(plant.status).toBe(200)
      await settled(id, 3)
      const asked = github.requests.length
      const look = await t.app.handle(
        req('POST', `/o/acme/p/app/sessions/${id}/messages`, {
          token: t.admin.token,
          body: {
            content: script([
              { bash: 'test -L ~/.gitconfig && echo link || echo file; git ls-remote origin HEAD | wc -l' },
              { answer: 'looked' },
            ]),
          },
        }),
      )
      expect(look.status).toBe(200)
      expect((await settled(id, 4)).status).toBe('completed')
      expect(
        t.store
          .allEvents(id)
          .filter((e) => e.type === 'tool_result')
          .at(-1)!.data.output,
      ).toMatch(/^file\n1/)
      expect(readFileSync(target, 'utf8')).toBe('host content\n')
      // That turn changed nothing: nothing pushed, the code host not asked again.
      expect(github.requests.length).toBe(asked)
      // The code host down: still 200, with the link and the reason.
      github.down = true
      try {
        expect(await changes(id)).toMatchObject({ pr_url: row.prUrl, files: [], error_code: 'CHANGES_LIST_FAILED' })
      } finally {
        github.down = false
      }
      // Another run on that pull request (on_pr) starts on its branch and adds to it.
      const onPr = await run(
        'app',
        [
          { bash: 'git rev-parse --abbrev-ref HEAD; cat README.md' },
          { write: { path: 'MORE.md', content: 'more\n' } },
          { answer: 'added' },
        ],
        { on_pr: pull.number },
      )
      expect(onPr.row.status, `${onPr.row.error}`).toBe('completed')
      expect(onPr.outputs[0]).toMatch(new RegExp(`^${row.branch}\nhello from the repository\nchanged`))
      expect(onPr.row.prUrl).toBe(row.prUrl)
      expect(github.pulls.get('acme/app')!.filter((p) => p.head === row.branch)).toHaveLength(1)
      expect((await changes(onPr.id)).files.map((f: { filename: string }) => f.filename)).toEqual(['MORE.md', 'README.md'])
      // Its files produced are the pull request's, as the code host lists them.
      expect(onPr.row.filesProduced).toBe(2)
      // Attack: the agent makes its branch track a name with a newline, to slip a count of its own
      // into what the publish prints. The publish refuses the name; nothing is counted or pushed.
      const forged = await run('app', [
        { bash: 'git config "branch.$(git symbolic-ref --short HEAD).merge" "$(printf \'refs/heads/main\\n99999\')"; echo x > X.md' },
        { answer: 'forged' },
      ])
      expect(forged.row.status, `${forged.row.error}`).toBe('completed')
      expect(forged.row.filesProduced).toBeNull()
      expect(forged.row.prUrl).toBeNull()
      expect((await view(forged.id)).files_produced).toBeNull()
      expect(logs.join('\n')).toContain('tracks no valid branch name')
      // A fork of it publishes to a branch and pull request of its own: the source's is not touched.
      const forked = await t.app.handle(req('POST', `/o/acme/p/app/sessions/${onPr.id}/fork`, { token: t.admin.token }))
      expect(forked.status).toBe(202)
      const fork = (await json(forked)).execution_id as string
      const forkTurn = await t.app.handle(
        req('POST', `/o/acme/p/app/sessions/${fork}/messages`, {
          token: t.admin.token,
          body: { content: script([{ write: { path: 'FORK.md', content: 'fork\n' } }, { answer: 'forked' }]) },
        }),
      )
      expect(forkTurn.status).toBe(200)
      const forkRow = await settled(fork)
      expect(forkRow.status, `${forkRow.error}`).toBe('completed')
      expect(forkRow.branch).toBe(`agentd/${fork.slice(0, 8)}`)
      expect(forkRow.prUrl).not.toBe(row.prUrl)
      expect((await changes(fork)).files.map((f: { filename: string }) => f.filename)).toContain('FORK.md')
      expect((await changes(onPr.id)).files.map((f: { filename: string }) => f.filename)).toEqual(['MORE.md', 'README.md'])
      // A pull request that is not open is refused at create.
      pull.state = 'closed'
      const refused = await t.app.handle(
        req('POST', '/o/acme/p/app/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: 'x', on_pr: pull.number } }),
      )
      expect(refused.status).toBe(409)
      expect((await json(refused)).error).toContain(`pull request #${pull.number} of acme/app is not open`)
      expect(
        (
          await t.app.handle(
            req('POST', '/o/acme/p/app/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: 'x', on_pr: 999 } }),
          )
        ).status,
      ).toBe(409)
    }, 180_000)

    test("the workspace is a checkout of the default branch; from inside, the gateway serves git for the session's own repository only (another 404, without the turn's key 401); the code host's token is nowhere in the sandbox or the run; no change, no pull request", async () => {
      const before = git.authorizations.length
      const { id, row, outputs } = await run('app', [
        { bash: 'cat README.md; git log --oneline | head -1; git rev-parse --abbrev-ref HEAD; git status --short | wc -l' },
        { bash: `git ls-remote ${git.url}/acme/other.git 2>&1 | tail -1; echo "exit=$?"` },
        {
          bash: `curl -s -o /dev/null -w '%{http_code}' "$(git config --get-regexp 'url\\..*insteadof' | cut -d' ' -f1 | sed 's/^url\\.//; s/\\.insteadof$//')acme/app.git/info/refs?service=git-upload-pack"`,
        },
        { answer: 'read it' },
      ])
      expect(row.status, `${row.error}`).toBe('completed')
      expect(outputs[0]).toContain('hello from the repository')
      expect(outputs[0]).toMatch(/first\nmain\n0/)
      expect(outputs[1]).toMatch(/not found|404/i)
      expect(outputs[2]).toBe('401')
      expect(outputs.join('\n')).not.toContain('not this session')
      // Every request reached the code host with an installation token agentd put on, scoped to acme/app alone.
      const seen = git.authorizations.slice(before).map((header) => Buffer.from(header.replace(/^Basic /, ''), 'base64').toString())
      expect(seen.length).toBeGreaterThan(0)
      for (const credential of seen) {
        const [user, token] = credential.split(':')
        expect(user).toBe('x-access-token')
        expect(github.tokens.get(token!)).toEqual({ installation: INSTALLATION, repositories: ['app'] })
      }
      const events = JSON.stringify(t.store.allEvents(id))
      const raw = t.store
        .transcriptLines(id)
        .map((l) => l.line)
        .join('\n')
      const files = Bun.spawnSync([
        'sh',
        '-c',
        'grep -rI -l . "$1" 2>/dev/null | xargs -r cat 2>/dev/null',
        'sh',
        join(t.dir, 'sandboxes', id),
      ]).stdout.toString()
      expect(files).toContain('hello from the repository') // the search did read the checkout
      const stored = (await json(await t.app.handle(req('GET', `/o/acme/p/app/sessions/${id}/logs`, { token: t.admin.token }))))
        .logs as string
      expect(stored).toContain('git')
      expect(github.tokens.size).toBeGreaterThan(0)
      for (const where of [events, raw, files, stored, logs.join('\n')]) expect(secretsIn(where)).toEqual([])
      // Nothing changed: no branch, no pull request, an empty list of changes, no file produced.
      expect(row.prUrl).toBeNull()
      expect(row.filesProduced).toBe(0)
      expect(await changes(id)).toEqual({
        pr_url: null,
        pr_number: null,
        files: [],
        totals: { files: 0, additions: 0, deletions: 0, changes: 0 },
      })
    }, 120_000)

    // Decided before any sandbox is involved: shown on bubblewrap alone.
    if (driver === 'bwrap')
      test('a run of no Project that names a repository in resources starts in its checkout, on the branch its /tree/ names', async () => {
        const res = await t.app.handle(
          req('POST', '/o/acme/p/_/sessions', {
            token: t.admin.token,
            body: {
              harness: 'harness_1',
              input: script([{ bash: 'git rev-parse --abbrev-ref HEAD; cat README.md' }, { answer: 'read' }]),
              resources: [{ url: 'https://github.com/acme/app/tree/main' }],
            },
          }),
        )
        expect(res.status, JSON.stringify(await res.clone().json())).toBe(202)
        const id = (await json(res)).execution_id as string
        const row = await settled(id)
        expect(row).toMatchObject({ status: 'completed', repoOwner: 'acme', repoName: 'app', baseBranch: 'main' })
        expect(String(t.store.allEvents(id).find((e) => e.type === 'tool_result')!.data.output)).toMatch(/^main\nhello from the repository/)
        // Another repository than a Project's own is still refused on that Project's runs.
        const other = await t.app.handle(
          req('POST', '/o/acme/p/app/sessions', {
            token: t.admin.token,
            body: { harness: 'harness_1', input: 't', resources: [{ url: 'https://github.com/acme/other' }] },
          }),
        )
        expect(other.status).toBe(422)
      }, 120_000)

    if (driver === 'bwrap')
      test('a run of no Project has no checkout and no git config', async () => {
        const { row, outputs } = await run('_', [{ bash: 'ls -A; test -e ~/.gitconfig && echo config || echo none' }, { answer: 'looked' }])
        expect(row.status).toBe('completed')
        expect(outputs[0]).not.toContain('.git')
        expect(outputs[0]).toContain('none')
        // No repository, no pull request to count files of.
        expect(row.filesProduced).toBeNull()
      }, 120_000)

    if (driver === 'bwrap')
      test("the org's installations are listed; 403 INSTALLATION_NOT_LINKED and REPO_NOT_IN_INSTALLATION, 409 when suspended, 422 for a resources repository none covers, 503 with the code host down; once unlinked, changes says CHANGES_NO_INSTALLATION; no token or key in any log", async () => {
        const create = (token: string, path: string, body: Record<string, unknown> = { agent: 'harness_1', prompt: 'x' }) =>
          t.app
            .handle(req('POST', `${path}/sessions`, { token, body }))
            .then(async (res) => ({ status: res.status, body: await json(res) }))
        const listed = json(await t.app.handle(req('GET', '/o/acme/github', { token: t.member.token })))
        expect(await listed).toEqual({
          data: [{ id: expect.any(String), installation_id: INSTALLATION, account: 'acme', created_at: expect.any(String) }],
        })
        const link = (await listed).data[0].id as string
        // Another org: its Project's repository is refused, as it links no installation; it lists none.
        t.identity.createOrg('globex')
        const globex = t.identity.createUser('globex', 'ada@globex.test', 'admin')
        t.identity.createProject('globex', 'site', 'acme/app')
        expect(await json(await t.app.handle(req('GET', '/o/globex/github', { token: globex.token })))).toEqual({ data: [] })
        expect(await create(globex.token, '/o/globex/p/site')).toMatchObject({ status: 403, body: { code: 'INSTALLATION_NOT_LINKED' } })
        // Nor may that org link acme's installation: one org per installation.
        const taken = await adminWith(host.env, t.dir, 'github', 'link', '--org', 'globex', '--installation', String(INSTALLATION))
        expect([taken.code, taken.stderr]).toEqual([2, expect.stringContaining('linked to another org')])
        expect((await adminWith(host.env, t.dir, 'github', 'link', '--org', 'acme', '--installation', '999')).stderr).toContain(
          'no installation 999',
        )
        // A repository no installation covers, and one another (unlinked) installation covers: 403.
        git.repo('acme', 'private', { 'README.md': 'private\n' })
        github.installations.set(202, { account: 'acme-labs', repositories: ['acme-labs/tool'], suspended: false })
        t.identity.createProject('acme', 'private', 'acme/private')
        t.identity.createProject('acme', 'tool', 'acme-labs/tool')
        for (const project of ['private', 'tool'])
          expect(await create(t.admin.token, `/o/acme/p/${project}`)).toMatchObject({
            status: 403,
            body: { code: 'REPO_NOT_IN_INSTALLATION' },
          })
        // A Project bound to its installation (admin CLI) runs through that one alone.
        const bound = await adminWith(
          host.env,
          t.dir,
          'project',
          'create',
          '--org',
          'acme',
          '--name',
          'bound',
          '--repo',
          'acme-labs/tool',
          '--github',
          String(INSTALLATION),
        )
        expect(bound.json, bound.stderr).toMatchObject({ name: 'bound', github_installation: link })
        expect(await create(t.admin.token, '/o/acme/p/bound')).toMatchObject({ status: 403, body: { code: 'REPO_NOT_IN_INSTALLATION' } })
        // A run of no Project naming a repository: through the installation its connection names, or any of the org's.
        const named = (url: string, connection?: string) =>
          create(t.admin.token, '/o/acme/p/_', {
            harness: 'harness_1',
            input: 'x',
            resources: [{ url, ...(connection ? { connection } : {}) }],
          })
        for (const [url, connection] of [
          ['https://github.com/acme/private'],
          ['https://github.com/acme-labs/tool'],
          ['https://github.com/acme/app', 'not-an-installation'],
          ['https://github.com/acme/app', '202'],
        ] as const) {
          expect({ url, connection, ...(await named(url, connection)) }).toMatchObject({
            status: 422,
            body: { code: 'RESOURCE_NOT_ACCESSIBLE' },
          })
        }
        // Suspended on GitHub: 409, for a Project run and a named repository alike.
        github.installations.get(INSTALLATION)!.suspended = true
        try {
          expect(await create(t.admin.token, '/o/acme/p/app')).toMatchObject({
            status: 409,
            body: { error: expect.stringContaining('suspended') },
          })
          expect((await named('https://github.com/acme/app', String(INSTALLATION))).status).toBe(409)
        } finally {
          github.installations.get(INSTALLATION)!.suspended = false
        }
        // The code host down: 503, said so, nothing stored.
        const before = t.store.countByStatus()
        github.down = true
        try {
          expect(await create(t.admin.token, '/o/acme/p/app')).toMatchObject({
            status: 503,
            body: { error: expect.stringContaining('code host') },
          })
        } finally {
          github.down = false
        }
        expect(t.store.countByStatus()).toEqual(before)
        // Unlinked: the pull request is still named, its files cannot be read through the org's App.
        expect(published).not.toBeNull()
        const unlinked = await adminWith(host.env, t.dir, 'github', 'unlink', '--org', 'acme', '--installation', link)
        expect(unlinked.code, unlinked.stderr).toBe(0)
        expect(await changes(published!.id)).toMatchObject({ pr_url: published!.prUrl, files: [], error_code: 'CHANGES_NO_INSTALLATION' })
        expect(await create(t.admin.token, '/o/acme/p/app')).toMatchObject({ status: 403, body: { code: 'INSTALLATION_NOT_LINKED' } })
        // Through all of it (and the runs before), no installation token nor the App's key was logged.
        expect(logs.length).toBeGreaterThan(0)
        expect(secretsIn(logs.join('\n'))).toEqual([])
      }, 60_000)
  })
}
