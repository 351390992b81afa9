import { isZeroId, readPushRequest, refusal, type PushRequest } from './receive-pack'

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
 * path, as if there were none. A push (`git-receive-pack`) is read up to its command list first
 * and sent on only when every command updates or creates `branch()`, the one branch the session
 * may push (contract section 11): no other branch, no delete, no tag; else none of it is.
 */
export async function proxyGitRequest(
  req: Request,
  target: { owner: string; name: string; rest: string },
  repository: { owner: string; name: string } | null,
  remote: GitRemote,
  branch: () => Promise<string | null> | string | null = () => null,
): Promise<Response> {
  const ours =
    repository !== null &&
    repository.owner.toLowerCase() === target.owner.toLowerCase() &&
    repository.name.toLowerCase() === target.name.toLowerCase()
  const url = new URL(req.url)
  const service = url.searchParams.get('service')
  const allowed =
    SMART.test(target.rest) &&
    (target.rest === 'info/refs' ? req.method === 'GET' && service !== null && SERVICES.has(service) : req.method === 'POST')
  if (!ours || !allowed) return new Response('Repository not found\n', { status: 404 })
  let body: ReadableStream<Uint8Array> | null = req.body
  if (target.rest === 'git-receive-pack') {
    const checked = await checkPush(req, branch)
    if (checked instanceof Response) return checked
    body = checked
  }
  const token = await remote.token(repository.owner, repository.name)
  const headers = new Headers()
  for (const name of PASSED) {
    const value = req.headers.get(name)
    if (value !== null) headers.set(name, value)
  }
  if (token) headers.set('authorization', `Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}`)
  const query = target.rest === 'info/refs' ? `?service=${service}` : ''
  const upstream = `${remote.baseUrl.replace(/\/+$/, '')}/${repository.owner}/${repository.name}.git/${target.rest}${query}`
  let answer: Response
  try {
    answer = await fetch(upstream, {
      method: req.method,
      headers,
      body: req.method === 'POST' ? body : null,
      redirect: 'manual',
      ...(req.method === 'POST' ? { duplex: 'half' } : {}),
    } as RequestInit)
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
  return new Response(status === answer.status ? answer.body : `the code host refused agentd (${answer.status})\n`, {
    status,
    headers: status === answer.status ? back : {},
  })
}

/** How long a refused push's pack is read (and dropped) before the refusal is sent anyway. */
const DRAIN_MS = 10_000

/**
 * A push's body to send on (its command list read, and given back first), or the answer refusing
 * it: 415 for a body git would not send (compressed), 400 for one agentd cannot read, and for a
 * command on any ref but the session's branch, or a delete, git's own report refusing each ref
 * (`! [remote rejected] <ref> (<why>)`), or a 403 for a client that asked for no report.
 */
async function checkPush(
  req: Request,
  branch: () => Promise<string | null> | string | null,
): Promise<ReadableStream<Uint8Array> | Response> {
  const encoding = req.headers.get('content-encoding')
  // git sends a push uncompressed: a body agentd would have to inflate to read is not taken.
  if (encoding !== null && encoding.toLowerCase() !== 'identity') return new Response('agentd takes pushes uncompressed\n', { status: 415 })
  let push: PushRequest
  try {
    push = await readPushRequest(req.body ?? new ReadableStream())
  } catch (err) {
    return new Response(`agentd could not read the push: ${(err as Error).message}\n`, { status: 400 })
  }
  if (push.commands.length === 0) return push.body
  // A branch that cannot be told (an on_pr pull request no longer open) is none.
  const own = await Promise.resolve()
    .then(branch)
    .catch(() => null)
  const allowed = own === null ? null : `refs/heads/${own}`
  const reasons = new Map<string, string>()
  for (const command of push.commands) {
    if (allowed === null) reasons.set(command.ref, 'agentd: this session may push no branch')
    else if (command.ref !== allowed) reasons.set(command.ref, `agentd: this session may push only ${own}`)
    else if (isZeroId(command.new)) reasons.set(command.ref, `agentd: ${own} may not be deleted`)
  }
  if (reasons.size === 0) return push.body
  // One refused command refuses the push: the others are told why.
  for (const command of push.commands)
    if (!reasons.has(command.ref)) reasons.set(command.ref, 'agentd: another ref of this push was refused')
  const message = `agentd: this session may push only ${own ?? 'no branch'} (no other branch, no tag, no delete)`
  // The pack is read to its end (and dropped) so git, still sending it, reads the answer.
  await drain(push.body, DRAIN_MS)
  if (!push.capabilities.includes('report-status') && !push.capabilities.includes('report-status-v2'))
    return new Response(`${message}\n`, { status: 403 })
  return new Response(refusal(push.commands, push.capabilities, reasons, message), {
    status: 200,
    headers: { 'content-type': 'application/x-git-receive-pack-result', 'cache-control': 'no-cache' },
  })
}

/** Reads `body` to its end or for `ms`, whichever is first, keeping nothing. */
async function drain(body: ReadableStream<Uint8Array>, ms: number): Promise<void> {
  const reader = body.getReader()
  const timer = setTimeout(() => void reader.cancel().catch(() => {}), ms)
  try {
    while (!(await reader.read()).done);
  } catch {
    // cancelled, or the client went away: either way the answer is sent
  } finally {
    clearTimeout(timer)
  }
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
