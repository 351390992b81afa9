import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'
import { makeTestCa, type TestCa } from '../helpers/tls'

/**
 * What one create may make agentd fetch (contract section 11): the caller's skills and images
 * together get at most 200 requests and 30 s (3 s here: AGENTD_TIME_SCALE=0.1), past which the
 * create is 422 SKILL_FETCH_FAILED; and a skill's YAML front matter may not use aliases. Against
 * local stand-ins only: an HTTPS host for SKILL.md files and images (a throwaway CA, trusted
 * through AGENTD_FETCH_CA_FILE), and a code host speaking GitHub's REST API that counts what it is asked.
 */

const BUDGET_MS = 3_000
const SHA = 'c0ffee0000000000000000000000000000000042'
const md = (name: string) => `---\nname: ${name}\ndescription: The ${name} skill, for tests.\n---\nUse it.\n`

let t: TestApp
let ca: TestCa
let host: ReturnType<typeof Bun.serve>
let codeHost: ReturnType<typeof Bun.serve>
let hostBase: string
/** Requests each stand-in was sent since the test's last reset. */
const seen = { host: 0, codeHost: 0 }

/** Repositories of the code host at SHA: a path is a file (its text) or a folder (`null`). */
const REPOS: Record<string, Record<string, string | null>> = {
  // One skill that walks into 300 empty folders: 300 requests for nothing.
  wide: { wide: null, 'wide/SKILL.md': md('wide'), ...Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`wide/d${i}`, null])) },
  // Twenty ordinary skills of nine files each: 12 requests per skill with the operator's token
  // (the repository, the commit, the folder, each file).
  ...Object.fromEntries(
    Array.from({ length: 20 }, (_, i) => [
      `many${i}`,
      {
        s: null,
        's/SKILL.md': md(`many-${i}`),
        ...Object.fromEntries(Array.from({ length: 8 }, (_, f) => [`s/f${f}.txt`, `file ${f}\n`])),
      },
    ]),
  ),
}

function codeHostAnswer(url: URL): Response | Promise<Response> {
  const api = (body: unknown, status = 200) => Response.json(body, { status })
  const [, , owner, repo, kind, ...rest] = url.pathname.split('/')
  // A repository whose host never answers.
  if (repo === 'hang') return new Promise(() => {})
  const files = owner === 'acme' && repo ? REPOS[repo] : undefined
  if (!files) return api({ message: 'Not Found' }, 404)
  if (kind === undefined) return api({ id: 1, name: repo, full_name: `acme/${repo}`, private: false, default_branch: 'main' })
  if (kind === 'commits')
    return api({
      sha: SHA,
      url: `${url.origin}/repos/acme/${repo}/commits/${SHA}`,
      html_url: `https://github.com/acme/${repo}/commit/${SHA}`,
    })
  if (kind !== 'contents' || url.searchParams.get('ref') !== SHA) return api({ message: 'Not Found' }, 404)
  const path = decodeURIComponent(rest.join('/'))
  const entry = files[path]
  const links = (p: string) => ({ self: `${url.origin}/repos/acme/${repo}/contents/${p}`, git: null, html: null })
  if (typeof entry === 'string') {
    const bytes = Buffer.from(entry)
    return api({
      type: 'file',
      encoding: 'base64',
      size: bytes.byteLength,
      name: path.split('/').pop(),
      path,
      content: bytes.toString('base64'),
      sha: 'f'.repeat(40),
      url: links(path).self,
      git_url: null,
      html_url: null,
      download_url: null,
      _links: links(path),
    })
  }
  if (entry !== null) return api({ message: 'Not Found' }, 404)
  const children = Object.entries(files).filter(([p]) => p.startsWith(`${path}/`) && !p.slice(path.length + 1).includes('/'))
  return api(
    children.map(([p, content]) => ({
      type: content === null ? 'dir' : 'file',
      size: 0,
      name: p.split('/').pop(),
      path: p,
      sha: 'e'.repeat(40),
      url: links(p).self,
      git_url: null,
      html_url: null,
      download_url: null,
      _links: links(p),
    })),
  )
}

/** A 1x1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64')

/** Billion laughs below Bun's own alias limit: 2^19 strings from under 500 bytes, each level an alias of the last twice. */
const laughs = (levels: number) =>
  ['l0: &l0 "lol"', ...Array.from({ length: levels }, (_, i) => `l${i + 1}: &l${i + 1} [*l${i}, *l${i}]`)].join('\n')

const SKILL_FILES: Record<string, string> = {
  '/alias/SKILL.md': '---\nname: &n alias-skill\ndescription: *n\n---\nUse it.\n',
  '/brief/SKILL.md': '---\nname: brief-skill\ndescription: Aliases, as briefly as possible.\na: &x foo\nb: *x\n---\n',
  '/laughs/SKILL.md': `---\nname: laughs\ndescription: A nest of aliases.\n${laughs(19)}\n---\n`,
  '/merge/SKILL.md': '---\nbase: &b {name: merged, description: From a merge key.}\n<<: *b\n---\n',
  '/plain/SKILL.md': md('plain'),
  '/texts/SKILL.md': '---\nname: texts\ndescription: "Use *bold* & R&D: a *star* and an & are only text."\n---\n',
}

beforeAll(async () => {
  ca = makeTestCa()
  host = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    tls: { cert: ca.cert, key: ca.key },
    idleTimeout: 60,
    fetch: async (request) => {
      seen.host++
      const path = new URL(request.url).pathname
      // /slow/<n>/SKILL.md and /slow/<n>.png: each answered after 700 ms.
      const slow = /^\/slow\/(\d+)(\/SKILL\.md|\.png)$/.exec(path)
      if (slow) {
        await Bun.sleep(700)
        return slow[2] === '.png' ? new Response(PNG, { headers: { 'content-type': 'image/png' } }) : new Response(md(`slow-${slow[1]}`))
      }
      const body = SKILL_FILES[path]
      return body ? new Response(body) : new Response('not found', { status: 404 })
    },
  })
  hostBase = `https://127.0.0.1:${host.port}`
  codeHost = Bun.serve({
    port: 0,
    hostname: '127.0.0.1',
    idleTimeout: 60,
    fetch: (request) => {
      seen.codeHost++
      return codeHostAnswer(new URL(request.url))
    },
  })
  t = await makeTestApp({
    AGENTD_TIME_SCALE: String(BUDGET_MS / 30_000),
    AGENTD_FETCH_CA_FILE: ca.caFile,
    AGENTD_GITHUB_API_URL: `http://127.0.0.1:${codeHost.port}`,
    AGENTD_GITHUB_TOKEN: 'operator-token',
    // The stand-ins listen on 127.0.0.1 (tests only).
    AGENTD_WEBHOOK_ALLOW_PRIVATE: '1',
  })
})
afterAll(async () => {
  await t?.[Symbol.asyncDispose]()
  host?.stop(true)
  codeHost?.stop(true)
  ca?.remove()
})

/** A create with `extra`, timed; the stand-ins' counters start from zero. */
async function create(extra: Record<string, unknown>) {
  seen.host = 0
  seen.codeHost = 0
  const started = performance.now()
  const res = await t.app.handle(
    req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { harness: 'harness_2', input: 'Say hello.', ...extra } }),
  )
  return { status: res.status, body: await json(res), ms: performance.now() - started }
}

describe('at most 200 requests per create', () => {
  test('a skill whose folder walk would take 303 requests is 422 SKILL_FETCH_FAILED after at most 200', async () => {
    const answer = await create({ skills: ['https://github.com/acme/wide/tree/main/wide'] })
    expect({ status: answer.status, code: answer.body.code }).toEqual({ status: 422, code: 'SKILL_FETCH_FAILED' })
    expect(answer.body.error).toContain('200 requests')
    expect(seen.codeHost).toBeLessThanOrEqual(200)
  })

  test('twenty ordinary skills needing 240 requests together are refused too: the budget is the create’s, not each skill’s', async () => {
    const answer = await create({ skills: Array.from({ length: 20 }, (_, i) => `https://github.com/acme/many${i}/tree/main/s`) })
    expect({ status: answer.status, code: answer.body.code }).toEqual({ status: 422, code: 'SKILL_FETCH_FAILED' })
    expect(seen.codeHost).toBeLessThanOrEqual(200)
    // Sixteen of them fit: 192 requests.
    const fewer = await create({ skills: Array.from({ length: 16 }, (_, i) => `https://github.com/acme/many${i}/tree/main/s`) })
    expect(fewer.status).toBe(202)
    expect(seen.codeHost).toBe(192)
  })
})

describe(`at most 30 s per create (${BUDGET_MS / 1000} s here)`, () => {
  test('twenty skills each answered after 700 ms are 422 SKILL_FETCH_FAILED once the budget is spent, not 14 s later', async () => {
    const answer = await create({ skills: Array.from({ length: 20 }, (_, i) => `${hostBase}/slow/${i}/SKILL.md`) })
    expect({ status: answer.status, code: answer.body.code }).toEqual({ status: 422, code: 'SKILL_FETCH_FAILED' })
    expect(answer.body.error).toContain('3 s')
    expect(answer.ms).toBeGreaterThanOrEqual(BUDGET_MS - 100)
    expect(answer.ms).toBeLessThan(BUDGET_MS + 2_500)
    expect(seen.host).toBeLessThanOrEqual(6)
  }, 30_000)

  test('a code host that never answers is 422 within the budget', async () => {
    const answer = await create({ skills: ['https://github.com/acme/hang/tree/main/s'] })
    expect({ status: answer.status, code: answer.body.code }).toEqual({ status: 422, code: 'SKILL_FETCH_FAILED' })
    expect(answer.ms).toBeLessThan(BUDGET_MS + 2_500)
  }, 30_000)

  test("images share the create's budget with its skills", async () => {
    const images = Array.from({ length: 12 }, (_, i) => ({ type: 'image', source: { type: 'url', url: `${hostBase}/slow/${i}.png` } }))
    const answer = await create({ input: [{ type: 'text', text: 'Describe these.' }, ...images], skills: [`${hostBase}/plain/SKILL.md`] })
    expect({ status: answer.status, code: answer.body.code }).toEqual({ status: 422, code: 'SKILL_FETCH_FAILED' })
    expect(answer.ms).toBeLessThan(BUDGET_MS + 2_500)
    expect(seen.host).toBeLessThanOrEqual(6)
  }, 30_000)
})

describe('YAML aliases in front matter', () => {
  test('an alias, the brief’s `a: &x foo / b: *x`, a merge key and a billion-laughs nest are each 422 SKILL_INVALID at once', async () => {
    for (const path of ['/alias/SKILL.md', '/brief/SKILL.md', '/merge/SKILL.md', '/laughs/SKILL.md']) {
      const answer = await create({ skills: [`${hostBase}${path}`] })
      expect({ path, status: answer.status, code: answer.body.code }).toEqual({ path, status: 422, code: 'SKILL_INVALID' })
      expect(answer.body.error).toContain('aliases are refused')
      // Refused as the front matter is read, the server thread never held.
      expect(answer.ms).toBeLessThan(1_000)
    }
  })

  test('a star or an ampersand that is only text is no alias', async () => {
    const answer = await create({ skills: [`${hostBase}/texts/SKILL.md`, `${hostBase}/plain/SKILL.md`] })
    expect(answer.status).toBe(202)
    expect(answer.body.effective_config.skills.map((s: { name: string }) => s.name)).toEqual(['texts', 'plain'])
  })
})
