import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import type { components } from '@octokit/openapi-types'
import { strToU8, zipSync, type Zippable } from 'fflate'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'
import { makeTestCa, type TestCa } from '../helpers/tls'

/**
 * Shape B `skills` (spec 4.1, 8) through the HTTP API of a real agentd on bwrap, against local
 * servers only: an HTTPS skills host whose certificate a throwaway CA signed (the fetcher trusts it
 * through AGENTD_FETCH_CA_FILE), and a code host speaking GitHub's REST API (its answers typed
 * with GitHub's published OpenAPI description, @octokit/openapi-types).
 */

type ContentFile = components['schemas']['content-file']
type ContentEntry = components['schemas']['content-directory'][number]
type CommitAnswer = Pick<components['schemas']['commit'], 'sha' | 'url' | 'html_url'>
type RepoAnswer = Pick<components['schemas']['full-repository'], 'id' | 'name' | 'full_name' | 'private' | 'default_branch'>

const SHA = 'c0ffee0000000000000000000000000000000042'
const md = (name: string, body = 'Use the helper script.') =>
  `---\nname: ${name}\ndescription: A ${name} for tests. Use it when asked about ${name}.\n---\n${body}\n`

let t: TestApp
let ca: TestCa
let skillsHost: ReturnType<typeof Bun.serve>
let codeHost: ReturnType<typeof Bun.serve>
let skillsBase: string
/** Every `ref` the code host was asked contents at. */
const contentRefs: string[] = []

/** A symlink entry as Info-ZIP writes one made on Unix: S_IFLNK in the high half of its external attributes. */
const link = (target: string): [Uint8Array, { os: number; attrs: number }] => [strToU8(target), { os: 3, attrs: (0o120777 << 16) >>> 0 }]

function zip(files: Zippable): Uint8Array {
  return zipSync(files, { level: 6 })
}

const SKILL_FILES: Record<string, Uint8Array> = {
  '/zip-skill.zip': zip({
    'zip-skill/SKILL.md': strToU8(md('zip-skill')),
    'zip-skill/scripts/hello.sh': strToU8('echo hello from the zip\n'),
  }),
  '/plain/SKILL.md': strToU8(md('plain-skill')),
  '/dotdot.zip': zip({ 'SKILL.md': strToU8(md('dotdot')), '../escape.txt': strToU8('out') }),
  '/absolute.zip': zip({ 'SKILL.md': strToU8(md('absolute')), '/etc/cron.d/evil': strToU8('* * * * * root sh') }),
  '/link.zip': zip({ 'SKILL.md': strToU8(md('linked')), passwd: link('/etc/passwd') }),
  '/noname/SKILL.md': strToU8('No front matter here.\n'),
  '/badname/SKILL.md': strToU8(md('Bad Name!')),
  '/nomd.zip': zip({ 'README.md': strToU8('no skill here') }),
  '/clash.zip': zip({ 'SKILL.md': strToU8(md('clash')), scripts: strToU8('a file'), 'scripts/run.sh': strToU8('echo') }),
  // Random bytes do not compress: over 96 KiB packed.
  '/big.zip': zip({ 'SKILL.md': strToU8(md('big')), 'blob.bin': crypto.getRandomValues(new Uint8Array(120 * 1024)) }),
}

/** The code host's repository acme/skills at SHA (what `main` points at). */
const REPO: Record<string, string | ContentEntry['type']> = {
  'tree-skill/SKILL.md': md('tree-skill'),
  'tree-skill/scripts/run.sh': 'echo run from the tree\n',
  'linked-skill/SKILL.md': md('linked-skill'),
  'linked-skill/escape': 'symlink',
}

function githubAnswer(url: URL): Response {
  const api = (body: unknown, status = 200) => Response.json(body, { status })
  const repo = /^\/repos\/acme\/(skills|secret)$/.exec(url.pathname)
  if (repo)
    return api({
      id: 1,
      name: repo[1]!,
      full_name: `acme/${repo[1]}`,
      private: repo[1] === 'secret',
      default_branch: 'main',
    } satisfies RepoAnswer)
  const commit = /^\/repos\/acme\/skills\/commits\/([^/]+)$/.exec(url.pathname)
  if (commit) {
    if (commit[1] !== 'main' && commit[1] !== SHA) return api({ message: `No commit found for SHA: ${commit[1]}`, status: '422' }, 422)
    return api({
      sha: SHA,
      url: `${url.origin}/repos/acme/skills/commits/${SHA}`,
      html_url: `https://github.com/acme/skills/commit/${SHA}`,
    } satisfies CommitAnswer)
  }
  const content = /^\/repos\/acme\/skills\/contents\/(.*)$/.exec(url.pathname)
  if (!content) return api({ message: 'Not Found' }, 404)
  const ref = url.searchParams.get('ref') ?? ''
  contentRefs.push(ref)
  if (ref !== SHA) return api({ message: 'No commit found for the ref' }, 404)
  const path = decodeURIComponent(content[1]!)
  const links = (p: string) => ({ self: `${url.origin}/repos/acme/skills/contents/${p}`, git: null, html: null })
  const file = REPO[path]
  if (typeof file === 'string' && file !== 'symlink') {
    const bytes = Buffer.from(file)
    return api({
      type: 'file',
      encoding: 'base64',
      size: bytes.byteLength,
      name: path.split('/').pop()!,
      path,
      content: bytes.toString('base64'),
      sha: 'f'.repeat(40),
      url: links(path).self,
      git_url: null,
      html_url: null,
      download_url: null,
      _links: links(path),
    } satisfies ContentFile)
  }
  const children = new Map<string, ContentEntry['type']>()
  for (const [p, kind] of Object.entries(REPO)) {
    if (!p.startsWith(`${path}/`)) continue
    const rest = p.slice(path.length + 1).split('/')
    children.set(rest[0]!, rest.length > 1 ? 'dir' : kind === 'symlink' ? 'symlink' : 'file')
  }
  if (children.size === 0) return api({ message: 'Not Found' }, 404)
  return api(
    [...children].map(([name, type]): ContentEntry => {
      const p = `${path}/${name}`
      return {
        type,
        size: 0,
        name,
        path: p,
        sha: 'e'.repeat(40),
        url: links(p).self,
        git_url: null,
        html_url: null,
        download_url: null,
        _links: links(p),
      }
    }),
  )
}

beforeAll(async () => {
  ca = makeTestCa()
  skillsHost = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    tls: { cert: ca.cert, key: ca.key },
    fetch: (request) => {
      const body = SKILL_FILES[new URL(request.url).pathname]
      return body ? new Response(body) : new Response('not found', { status: 404 })
    },
  })
  skillsBase = `https://127.0.0.1:${skillsHost.port}`
  codeHost = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: (request) => githubAnswer(new URL(request.url)) })
  t = await makeTestApp({
    AGENTD_SANDBOX: 'bwrap',
    AGENTD_FETCH_CA_FILE: ca.caFile,
    AGENTD_GITHUB_API_URL: `http://127.0.0.1:${codeHost.port}`,
    // With an operator token, private repositories must stay closed to callers.
    AGENTD_GITHUB_TOKEN: 'operator-token',
    // The skills host listens on 127.0.0.1 (tests only).
    AGENTD_WEBHOOK_ALLOW_PRIVATE: '1',
  })
})
afterAll(async () => {
  await t?.[Symbol.asyncDispose]()
  skillsHost?.stop(true)
  codeHost?.stop(true)
  ca?.remove()
})

const SESSIONS = '/o/acme/p/_/sessions'
async function create(body: unknown) {
  const res = await t.app.handle(req('POST', SESSIONS, { token: t.admin.token, body }))
  return { status: res.status, body: await json(res) }
}
async function finished(id: string) {
  return waitFor(
    async () => json(await t.app.handle(req('GET', `${SESSIONS}/${id}`, { token: t.admin.token }))),
    (s) => !['queued', 'allocating', 'running'].includes(s.status),
    60_000,
  )
}
const shellOutput = (id: string) =>
  t.store
    .allEvents(id)
    .filter((e) => e.type === 'tool_result')
    .map((e) => String(e.data.output ?? ''))
    .join('\n')

describe('skills', () => {
  test('a skill from a zip and one from a code-host folder are installed where Claude Code loads them, and the folder is pinned to its commit', async () => {
    const treeUrl = 'https://github.com/acme/skills/tree/main/tree-skill'
    const zipUrl = `${skillsBase}/zip-skill.zip`
    const reader = script([
      {
        bash: 'cat ~/.claude/skills/tree-skill/scripts/run.sh ~/.claude/skills/zip-skill/scripts/hello.sh; head -2 ~/.claude/skills/zip-skill/SKILL.md',
      },
      { answer: 'read the skills' },
    ])
    contentRefs.length = 0
    const created = await create({ harness: 'harness_1', input: reader, skills: [zipUrl, { url: treeUrl }] })
    expect(created.status).toBe(202)
    expect(created.body.effective_config.skills).toEqual([
      { name: 'zip-skill', url: zipUrl, commit: null },
      { name: 'tree-skill', url: treeUrl, commit: SHA },
    ])
    // The folder was read at the commit `main` pointed at, never at the branch itself.
    expect(new Set(contentRefs)).toEqual(new Set([SHA]))
    const done = await finished(created.body.execution_id)
    expect(done.status).toBe('completed')
    expect(shellOutput(done.execution_id)).toContain('echo run from the tree\necho hello from the zip\n---\nname: zip-skill')
    // Claude Code loaded both: its init event lists each skill as a slash command.
    const init = t.store
      .transcriptLines(done.execution_id)
      .map((l) => JSON.parse(l.line) as { type?: string; subtype?: string; slash_commands?: string[] })
      .find((e) => e.type === 'system' && e.subtype === 'init')
    expect(init?.slash_commands).toEqual(expect.arrayContaining(['zip-skill', 'tree-skill']))
  }, 60_000)

  test('Codex and Gemini CLI get theirs in their own skills folders: a SKILL.md from any https host, and a code-host blob pinned', async () => {
    const blobUrl = 'https://github.com/acme/skills/blob/main/tree-skill/SKILL.md'
    for (const [harness, dir] of [
      ['harness_2', '.codex/skills'],
      ['harness_3', '.gemini/skills'],
    ] as const) {
      const created = await create({
        harness,
        input: script([{ bash: `head -2 ~/${dir}/plain-skill/SKILL.md ~/${dir}/tree-skill/SKILL.md` }, { answer: 'ok' }]),
        skills: [`${skillsBase}/plain/SKILL.md`, blobUrl],
      })
      expect(created.status).toBe(202)
      expect(created.body.effective_config.skills).toEqual([
        { name: 'plain-skill', url: `${skillsBase}/plain/SKILL.md`, commit: null },
        { name: 'tree-skill', url: blobUrl, commit: SHA },
      ])
      const done = await finished(created.body.execution_id)
      expect(done.status).toBe('completed')
      expect(shellOutput(done.execution_id)).toContain('name: plain-skill')
      expect(shellOutput(done.execution_id)).toContain('name: tree-skill')
    }
  }, 60_000)

  test("a saved agent's skills are fetched and pinned when each run starts; a run's own skills replace them", async () => {
    const agent = await json(
      await t.app.handle(
        req('POST', '/o/acme/agents', {
          token: t.admin.token,
          body: { name: 'skilled', harness: 'harness_2', skills: ['https://github.com/acme/skills/tree/main/tree-skill'] },
        }),
      ),
    )
    expect(agent.skills).toEqual(['https://github.com/acme/skills/tree/main/tree-skill'])
    const run = await create({
      agent_id: agent.id,
      input: script([{ bash: 'cat ~/.codex/skills/tree-skill/scripts/run.sh' }, { answer: 'ok' }]),
    })
    expect(run.status).toBe(202)
    expect(run.body.effective_config.skills).toEqual([
      { name: 'tree-skill', url: 'https://github.com/acme/skills/tree/main/tree-skill', commit: SHA },
    ])
    const done = await finished(run.body.execution_id)
    expect(shellOutput(done.execution_id)).toContain('echo run from the tree')
    const own = await create({ agent_id: agent.id, input: 't', skills: [`${skillsBase}/plain/SKILL.md`] })
    expect(own.body.effective_config.skills.map((s: { name: string }) => s.name)).toEqual(['plain-skill'])
  }, 60_000)

  test('each skill error is a 422 naming the skill, and nothing is created', async () => {
    const before = (await json(await t.app.handle(req('GET', SESSIONS, { token: t.admin.token })))).executions.length
    const cases: [string[], string, string][] = [
      [[`${skillsBase}/missing/SKILL.md`], 'SKILL_FETCH_FAILED', 'answered 404'],
      [['https://github.com/acme/skills/tree/no-such-branch/tree-skill'], 'SKILL_FETCH_FAILED', 'HTTP 422'],
      [['https://github.com/acme/skills/tree/main/no-such-skill'], 'SKILL_FETCH_FAILED', 'HTTP 404'],
      [['https://example.com/not-a-skill.txt'], 'SKILL_INVALID', 'not a skill URL'],
      [[`${skillsBase}/noname/SKILL.md`], 'SKILL_INVALID', 'no front matter'],
      [[`${skillsBase}/badname/SKILL.md`], 'SKILL_INVALID', 'lower-case letters'],
      [[`${skillsBase}/nomd.zip`], 'SKILL_INVALID', 'no SKILL.md'],
      [[`${skillsBase}/dotdot.zip`], 'SKILL_INVALID', 'unsafe path'],
      [[`${skillsBase}/absolute.zip`], 'SKILL_INVALID', 'unsafe path'],
      [[`${skillsBase}/link.zip`], 'SKILL_INVALID', 'a link or a special file'],
      [['https://github.com/acme/skills/tree/main/linked-skill'], 'SKILL_INVALID', 'is a symlink'],
      [[`${skillsBase}/big.zip`], 'SKILL_INVALID', 'pack to'],
      [[`${skillsBase}/clash.zip`], 'SKILL_INVALID', 'both a file and a folder'],
      [['https://github.com/acme/secret/tree/main/tree-skill'], 'SKILL_FETCH_FAILED', 'not a public repository'],
      [[`${skillsBase}/%zz/SKILL.md`], 'SKILL_INVALID', 'not a skill URL'],
      [[`${skillsBase}/plain/SKILL.md`, `${skillsBase}/plain/SKILL.md`], 'SKILL_INVALID', 'two skills are named plain-skill'],
    ]
    for (const [skills, code, says] of cases) {
      const answer = await create({ harness: 'harness_2', input: 't', skills })
      expect({ skills, status: answer.status, code: answer.body.code }).toEqual({ skills, status: 422, code })
      expect(answer.body.error).toContain(says)
      expect(answer.body.error).toContain(`skills[${skills.length - 1}]`)
    }
    expect((await json(await t.app.handle(req('GET', SESSIONS, { token: t.admin.token })))).executions.length).toBe(before)
  })
})
