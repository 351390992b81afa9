/**
 * The sandbox's only way to its session's repository: git's smart HTTP through the model gateway
 * (`/git/<owner>/<name>.git/…`), with the gateway key of the turn as the credential. agentd sends
 * the request on to the code host with the code host's own credential, which never enters the
 * sandbox, and only for the session's own repository.
 */

/** What the proxy needs to reach a code host's git side. */
export interface GitRemote {
  /** Where repositories are, e.g. https://github.com (`<base>/<owner>/<name>.git`). */
  baseUrl: string
  /** The credential for `owner/name`, sent as GitHub takes an installation token; null: none. */
  token(owner: string, name: string): Promise<string | null> | string | null
}

/** The paths of smart HTTP, and nothing else (no dumb-protocol file reads). */
const SMART = /^(info\/refs|git-upload-pack|git-receive-pack)$/
const SERVICES = new Set(['git-upload-pack', 'git-receive-pack'])
/** Request headers git's protocol uses; every other (the gateway key among them) stays here. */
const PASSED = ['content-type', 'accept', 'content-encoding', 'git-protocol', 'user-agent']
const RETURNED = ['content-type', 'cache-control', 'expires', 'pragma']

/**
 * One request of git inside the sandbox for `owner/name` (the path after `.git/` is `rest`), for a
 * session whose repository is `repository` (null: it has none). 404 for any other repository or
 * path, as if there were none.
 */
export async function proxyGitRequest(req: Request, target: { owner: string; name: string; rest: string }, repository: { owner: string; name: string } | null, remote: GitRemote): Promise<Response> {
  const ours = repository !== null && repository.owner.toLowerCase() === target.owner.toLowerCase() && repository.name.toLowerCase() === target.name.toLowerCase()
  const url = new URL(req.url)
  const service = url.searchParams.get('service')
  const allowed = SMART.test(target.rest) && (target.rest === 'info/refs' ? req.method === 'GET' && service !== null && SERVICES.has(service) : req.method === 'POST')
  if (!ours || !allowed) return new Response('Repository not found\n', { status: 404 })
  const token = await remote.token(repository.owner, repository.name)
  const headers = new Headers()
  for (const name of PASSED) {
    const value = req.headers.get(name)
    if (value !== null) headers.set(name, value)
  }
  if (token) headers.set('authorization', `Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}`)
  const upstream = `${remote.baseUrl.replace(/\/+$/, '')}/${repository.owner}/${repository.name}.git/${target.rest}${target.rest === 'info/refs' ? `?service=${service}` : ''}`
  let answer: Response
  try {
    answer = await fetch(upstream, { method: req.method, headers, body: req.method === 'POST' ? req.body : null, redirect: 'manual', ...(req.method === 'POST' ? { duplex: 'half' } : {}) } as RequestInit)
  } catch (err) {
    return new Response(`agentd could not reach the code host: ${(err as Error).message}\n`, { status: 502 })
  }
  const back = new Headers()
  for (const name of RETURNED) {
    const value = answer.headers.get(name)
    if (value !== null) back.set(name, value)
  }
  // The code host's own challenge is not passed on: the sandbox has no credential to answer it with.
  const status = answer.status === 401 || answer.status === 403 ? 502 : answer.status >= 300 && answer.status < 400 ? 502 : answer.status
  return new Response(status === answer.status ? answer.body : `the code host refused agentd (${answer.status})\n`, { status, headers: status === answer.status ? back : {} })
}

/** The git config a turn's CLI gets in its home: the code host's URL goes to the gateway, with the turn's key. */
export function gitConfig(gatewayUrl: string, token: string, remoteBase: string): string {
  const through = `${gatewayUrl}/git/`
  return [
    '# Written by agentd before every turn: git reaches the repository through agentd.',
    `[url "${through}"]`,
    `\tinsteadOf = ${remoteBase.replace(/\/+$/, '')}/`,
    `[http "${through}"]`,
    `\textraHeader = Authorization: Bearer ${token}`,
    '[user]',
    '\tname = agentd',
    '\temail = agentd@localhost',
    '',
  ].join('\n')
}
