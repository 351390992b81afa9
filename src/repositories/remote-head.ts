import type { Repository } from './code-host'

/**
 * The commit a checkout of `branch` (or the default branch) would get, asked of the code host
 * before any sandbox exists: a prebuilt image is keyed by it. One request of git's own smart HTTP
 * protocol, the ref advertisement (`GET <repo>.git/info/refs?service=git-upload-pack`), read on the
 * host as data: no git process, no working tree. The default branch is the advertisement's
 * `symref=HEAD:refs/heads/<name>` capability. Resolves to `<branch>@<sha>`, so two branches at one
 * commit never share an image (their checkouts differ in the branch they track).
 */
export async function remoteHead(gitUrl: string, repository: Repository, token: string | null, branch: string | null): Promise<string> {
  const url = `${gitUrl}/${repository.owner}/${repository.name}.git/info/refs?service=git-upload-pack`
  const headers: Record<string, string> = { 'user-agent': 'git/agentd' }
  if (token) headers.authorization = `Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}`
  const response = await fetch(url, { headers, signal: AbortSignal.timeout(30_000) })
  if (!response.ok)
    throw new Error(`${repository.owner}/${repository.name}: the code host answered ${response.status} to the ref advertisement`)
  const refs = parseAdvertisement(new Uint8Array(await response.arrayBuffer()))
  const name = branch ?? refs.head
  if (!name) throw new Error(`${repository.owner}/${repository.name} has no default branch`)
  const sha = refs.refs.get(`refs/heads/${name}`)
  if (!sha) throw new Error(`${repository.owner}/${repository.name} has no branch ${name}`)
  return `${name}@${sha}`
}

/** The refs of a smart HTTP advertisement (pkt-lines, protocol v0/v1) and the default branch it names. */
export function parseAdvertisement(body: Uint8Array): { refs: Map<string, string>; head: string | null } {
  // A pkt-line's length (4 hex digits, itself included) counts bytes, so the body is cut as bytes.
  const decoder = new TextDecoder()
  const refs = new Map<string, string>()
  let head: string | null = null
  let at = 0
  while (at + 4 <= body.length) {
    const size = Number.parseInt(decoder.decode(body.subarray(at, at + 4)), 16)
    if (!Number.isFinite(size) || at + size > body.length) throw new Error('the ref advertisement is not in pkt-line form')
    if (size < 4) {
      at += 4 // a flush (0000) or delimiter packet
      continue
    }
    const line = decoder.decode(body.subarray(at + 4, at + size)).replace(/\n$/, '')
    at += size
    if (line.startsWith('# service=')) continue
    const [ref, capabilities] = line.split('\0') as [string, string | undefined]
    const match = /^([0-9a-f]{40,64}) (\S+)$/.exec(ref)
    if (match) refs.set(match[2]!, match[1]!)
    const symref = capabilities && /(?:^| )symref=HEAD:refs\/heads\/(\S+)/.exec(capabilities)
    if (symref) head = symref[1]!
  }
  return { refs, head }
}
