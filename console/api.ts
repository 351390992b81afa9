import { agentdClient, type AgentdClient } from '../clients/typescript/index.ts'

/** The typed client of the public API, on this origin, with the signed-in token. */
export function api(token: string): AgentdClient {
  return agentdClient(location.origin, token, { fetch: earlyOr })
}

/**
 * `fetch`, except that the request the page's head script already sent (the list's first page,
 * `early.ts`) is answered by that request, once: the same method, URL and token, so the same
 * answer. Should the early one fail, the request is sent again.
 */
function earlyOr(request: Request): Promise<Response> {
  const early = window.agentdEarly
  if (!early || request.method !== 'GET' || request.url !== early.url || request.headers.get('authorization') !== early.authorization)
    return fetch(request)
  window.agentdEarly = undefined
  return early.response.catch(() => fetch(request))
}

/** What an error answer says, in either of the spec's envelopes ({error} or {code, message}). */
export function said(error: unknown, status?: number): string {
  const body = error as { error?: string; message?: string; code?: string; error_code?: string } | undefined
  const text = body?.error ?? body?.message ?? (status ? `The server answered ${status}` : 'The server could not be reached')
  const code = body?.code ?? body?.error_code
  return code && !text.includes(code) ? `${text} (${code})` : text
}

/** An error answer as a form shows it: what it says, and which of the form's fields it names (`fields[].path`). */
export function refusal(error: unknown, status?: number): { text: string; fields: string[] } {
  const fields = (error as { fields?: { path?: unknown }[] } | undefined)?.fields
  return { text: said(error, status), fields: Array.isArray(fields) ? fields.map((f) => String(f.path)) : [] }
}
