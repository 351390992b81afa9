import { Octokit } from '@octokit/rest'
import { unprocessable } from '../domain/errors'
import { FetchRefused, FetchTooLarge, type Fetched } from '../egress/public-get'
import { FetchBudgetSpent, type FetchBudget } from '../egress/fetch-budget'
import {
  describe,
  MAX_FILES,
  MAX_PACKED_BYTES,
  MAX_UNPACKED_BYTES,
  packedBytes,
  pathClash,
  safePath,
  skillInvalid,
  unzip,
  type Skill,
  type SkillFiles,
} from './package'
import { skillSource, type SkillSource } from './source'

/** GETs a caller's URL under the webhook SSRF rules (egress/public-get.ts), reading at most `maxBytes`, until `signal` fires. */
export type PublicGet = (url: string, maxBytes: number, signal: AbortSignal) => Promise<Fetched>

export interface SkillFetcherDeps {
  /** The code host's REST API (AGENTD_GITHUB_API_URL; https://api.github.com). */
  githubApiUrl: string
  /** A token for the code host's API (AGENTD_GITHUB_TOKEN), for rate limits and private skills; none: anonymous. */
  githubToken: string | null
  get: PublicGet
}

const fetchFailed = (index: number, why: string) => unprocessable(`skills[${index}]: ${why}`, 'SKILL_FETCH_FAILED')

/** A skill URL as spec 4.1 allows it: a string or `{url}`. */
export type SkillRef = string | { url: string }

/**
 * Fetches a create's skills (spec 4.1): each URL read as one of the forms, fetched now, a code-host
 * source pinned to the commit its branch or tag points at, each validated (SKILL.md with a name
 * and description, safe paths, no links), all of them at most 96 KiB packed. Every request, to the
 * code host's API too, is made within the create's fetch budget (egress/fetch-budget.ts). Errors
 * are 422 SKILL_FETCH_FAILED (could not be fetched, or the budget ran out) or SKILL_INVALID
 * (anything else), naming the skill.
 */
export class SkillFetcher {
  private readonly octokit: Octokit

  constructor(private readonly deps: SkillFetcherDeps) {
    // Quiet: a failed request becomes the caller's 422, not a console line of Octokit's own.
    const quiet = () => {}
    this.octokit = new Octokit({
      baseUrl: deps.githubApiUrl,
      userAgent: 'agentd',
      ...(deps.githubToken ? { auth: deps.githubToken } : {}),
      log: { debug: quiet, info: quiet, warn: quiet, error: quiet },
    })
  }

  async fetchAll(refs: SkillRef[], budget: FetchBudget): Promise<Skill[]> {
    const skills: Skill[] = []
    let unpacked = 0
    for (const [index, ref] of refs.entries()) {
      const url = typeof ref === 'string' ? ref : ref.url
      const source = skillSource(url)
      if (!source)
        throw skillInvalid(
          index,
          `${JSON.stringify(url)} is not a skill URL (a code-host tree or SKILL.md URL, an https SKILL.md, or a .zip)`,
        )
      const { files, commit } = await this.fetchOne(index, source, MAX_UNPACKED_BYTES - unpacked, budget)
      for (const path of files.keys()) if (!safePath(path)) throw skillInvalid(index, `unsafe path ${JSON.stringify(path)}`)
      const clash = pathClash(files)
      if (clash !== null) throw skillInvalid(index, `${JSON.stringify(clash)} is both a file and a folder`)
      const { name, description } = describe(index, files)
      if (skills.some((s) => s.name === name)) throw skillInvalid(index, `two skills are named ${name}`)
      unpacked += [...files.values()].reduce((sum, b) => sum + b.byteLength, 0)
      skills.push({ name, description, url, commit, files, packed: packedBytes(name, files) })
      if (skills.reduce((n, s) => n + s.files.size, 0) > MAX_FILES)
        throw skillInvalid(index, `the skills hold more than ${MAX_FILES} files`)
      const packed = 22 + skills.reduce((sum, s) => sum + s.packed, 0)
      if (packed > MAX_PACKED_BYTES) throw skillInvalid(index, `the skills pack to ${packed} bytes, over the ${MAX_PACKED_BYTES} allowed`)
    }
    return skills
  }

  private async fetchOne(
    index: number,
    source: SkillSource,
    maxBytes: number,
    budget: FetchBudget,
  ): Promise<{ files: SkillFiles; commit: string | null }> {
    switch (source.kind) {
      case 'file':
        return { files: new Map([['SKILL.md', await this.get(index, source.url, maxBytes, budget)]]), commit: null }
      case 'zip':
        // The zip itself is compressed: past the packed limit (plus its own headers) it cannot fit.
        return { files: await unzip(index, await this.get(index, source.url, MAX_PACKED_BYTES * 2, budget), maxBytes), commit: null }
      case 'code-host':
        return this.fromCodeHost(index, source, maxBytes, budget)
    }
  }

  private async get(index: number, url: string, maxBytes: number, budget: FetchBudget): Promise<Uint8Array> {
    try {
      return (await budget.run((signal) => this.deps.get(url, maxBytes, signal))).bytes
    } catch (err) {
      if (err instanceof FetchTooLarge) throw skillInvalid(index, `${url} is larger than a run's skills may be`)
      throw fetchFailed(index, err instanceof FetchRefused ? err.message : `${url} could not be fetched (${(err as Error).message})`)
    }
  }

  /** The commit `ref` names now, then the folder (or the one file) at that commit: the pin. */
  private async fromCodeHost(
    index: number,
    source: Extract<SkillSource, { kind: 'code-host' }>,
    maxBytes: number,
    budget: FetchBudget,
  ): Promise<{ files: SkillFiles; commit: string }> {
    const { owner, repo } = source
    // Each call is one request of the create's budget, cut off when its time is up.
    const api = async <T>(what: string, call: (request: { signal: AbortSignal }) => Promise<{ data: T }>): Promise<T> => {
      try {
        return (await budget.run((signal) => call({ signal }))).data
      } catch (err) {
        if (err instanceof FetchBudgetSpent) throw fetchFailed(index, `${what} of ${owner}/${repo} was not read: ${err.message}`)
        const status = (err as { status?: number }).status
        throw fetchFailed(
          index,
          `${what} of ${owner}/${repo} could not be read from the code host (${status ? `HTTP ${status}` : (err as Error).message})`,
        )
      }
    }
    // Skills are public URLs (spec 4.1): the operator's token must not open a private repository for a caller.
    if (
      this.deps.githubToken &&
      (await api('the repository', (request) => this.octokit.rest.repos.get({ owner, repo, request }))).private
    ) {
      throw fetchFailed(index, `${owner}/${repo} is not a public repository`)
    }
    const commit = (
      await api(`ref ${source.ref}`, (request) => this.octokit.rest.repos.getCommit({ owner, repo, ref: source.ref, request }))
    ).sha
    const files: SkillFiles = new Map()
    let total = 0
    const walk = async (path: string, rel: string, depth: number): Promise<void> => {
      const data = await api(path || 'the top folder', (request) =>
        this.octokit.rest.repos.getContent({ owner, repo, path, ref: commit, request }),
      )
      if (!Array.isArray(data)) {
        if (rel === '' && !source.file)
          throw skillInvalid(index, `${path || 'the top folder'} is a file: a tree URL names a skill's folder`)
        if (data.type !== 'file' || !('content' in data)) throw skillInvalid(index, `${path} is a ${data.type}, not a file or folder`)
        total += data.size
        if (total > maxBytes || (data.content === '' && data.size > 0))
          throw skillInvalid(index, `the skill is larger than ${maxBytes} bytes unpacked`)
        files.set(rel || 'SKILL.md', new Uint8Array(Buffer.from(data.content, 'base64')))
        return
      }
      if (depth > 8) throw skillInvalid(index, `${path} is nested more than 8 folders deep`)
      for (const entry of data) {
        if (entry.type === 'dir') await walk(entry.path, rel ? `${rel}/${entry.name}` : entry.name, depth + 1)
        else if (entry.type === 'file') await walk(entry.path, rel ? `${rel}/${entry.name}` : entry.name, depth)
        else throw skillInvalid(index, `${entry.path} is a ${entry.type}: a skill holds only files and folders`)
        if (files.size > MAX_FILES) throw skillInvalid(index, `the skill holds more than ${MAX_FILES} files`)
      }
    }
    await walk(source.path, '', 0)
    return { files, commit }
  }
}
