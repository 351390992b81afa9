import { ApiError } from '../domain/errors'
import type { NodeBeat, RegionService } from './service'

/**
 * Node-to-node HTTP of a region (contract section 12): a replica forwards every write to the
 * primary's agentd unchanged and answers once its own database has the primary's transaction;
 * nodes send the primary their heartbeat. Each such request carries AGENTD_CLUSTER_TOKEN.
 */

export const CLUSTER_TOKEN_HEADER = 'x-agentd-cluster-token'
/** On a forwarded write: the replica that forwarded it. */
export const FORWARDED_BY_HEADER = 'x-agentd-forwarded-by'
/** On the primary's answer to a forwarded write: the TXID the replica must have applied first. */
export const TXID_HEADER = 'x-agentd-txid'
/** Where nodes send their heartbeat to the primary. */
export const BEAT_PATH = '/_region/beat'
/** The region's own routes: node-to-node, never forwarded (a replica answers them itself). */
const REGION_PATHS = '/_region/'
/** Headers of one connection, not of the request: never passed on. */
const HOP_BY_HOP = [
  'host',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'upgrade',
  'expect',
  'content-length',
  'proxy-connection',
]

/** How long a forwarded write's answer waits for the replica to have the primary's transaction. */
export const CATCH_UP_MS = 5000
/** How long a replica waits for the primary's answer to a forwarded write. */
const FORWARD_TIMEOUT_MS = 300_000

/** Whether this request is a write a replica forwards (any method but GET and HEAD, to any route but the region's own). */
export function forwardsToPrimary(region: RegionService, request: Request): boolean {
  if (request.method === 'GET' || request.method === 'HEAD' || !region.clustered) return false
  // Any spelling of a region route (`/_region/beat/` reaches the beat too): answered here, never
  // sent on with this node's token.
  return region.role() === 'replica' && !`${new URL(request.url).pathname}/`.startsWith(REGION_PATHS)
}

/** Sends the write to the primary as it came; its answer once this replica has the transaction. */
export async function forwardToPrimary(region: RegionService, request: Request): Promise<Response> {
  const primary = region.primaryUrl()
  const token = region.clusterToken
  if (!primary || !token) throw unreachable(primary, 'no primary has recorded its address yet')
  // Sent on once only: a write another node forwarded here, or a primary recorded at this very
  // node (a role that just changed), would go round.
  if (forwardedByNode(region, request) || primary === region.ownUrl) throw unreachable(primary, 'the region is changing its primary')
  const url = new URL(request.url)
  const headers = new Headers(request.headers)
  for (const name of HOP_BY_HOP) headers.delete(name)
  headers.set(CLUSTER_TOKEN_HEADER, token)
  headers.set(FORWARDED_BY_HEADER, region.nodeName)
  let answer: Response
  try {
    // The body streams through (this node's own body limit bounds it); a caller gone cancels it.
    answer = await fetch(`${primary}${url.pathname}${url.search}`, {
      method: request.method,
      headers,
      body: request.body,
      duplex: 'half',
      redirect: 'manual',
      signal: AbortSignal.any([request.signal, AbortSignal.timeout(FORWARD_TIMEOUT_MS)]),
    } as RequestInit)
  } catch (err) {
    throw unreachable(primary, (err as Error).message)
  }
  const txid = Number(answer.headers.get(TXID_HEADER))
  // Read your writes: a GET here after this answer sees the write (or, past the wait, nearly so).
  if (txid > 0) await region.caughtUp(txid, CATCH_UP_MS)
  const out = new Headers(answer.headers)
  for (const name of [TXID_HEADER, 'content-length', 'content-encoding', 'transfer-encoding']) out.delete(name)
  return new Response(answer.body, { status: answer.status, statusText: answer.statusText, headers: out })
}

/** Whether the primary should tell this request's answer its TXID: a write forwarded by a node of the region. */
export function forwardedByNode(region: RegionService, request: Request): boolean {
  return request.headers.has(FORWARDED_BY_HEADER) && region.fromNode(request.headers.get(CLUSTER_TOKEN_HEADER))
}

/** A node's heartbeat to the primary. */
export async function sendBeat(primary: string, token: string, beat: NodeBeat): Promise<void> {
  const answer = await fetch(`${primary}${BEAT_PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', [CLUSTER_TOKEN_HEADER]: token },
    body: JSON.stringify(beat),
    signal: AbortSignal.timeout(10_000),
  })
  if (!answer.ok) throw new Error(`the primary answered ${answer.status} to the heartbeat: ${(await answer.text()).slice(0, 200)}`)
}

function unreachable(primary: string | null, why: string): ApiError {
  return new ApiError(
    'unavailable',
    `This node is a replica and forwards writes to the region's primary${primary ? ` (${primary})` : ''}, ` +
      `which it cannot reach: ${why}. Retry shortly`,
    'PRIMARY_UNAVAILABLE',
  )
}
