import { agentdClient, type AgentdClient } from '../clients/typescript/index.ts'

/** Who is signed in, kept in this tab's session storage: never in a URL, gone with the tab. */
export interface SignedIn {
  token: string
  email: string
  orgs: { slug: string; role: 'admin' | 'member' }[]
  /** The org the console shows. */
  org: string
}

const KEY = 'agentd.console.signed-in'

export function signedIn(): SignedIn | null {
  try {
    const raw = sessionStorage.getItem(KEY)
    return raw ? (JSON.parse(raw) as SignedIn) : null
  } catch {
    return null
  }
}

export function keep(who: SignedIn): void {
  sessionStorage.setItem(KEY, JSON.stringify(who))
}

export function signOut(): void {
  sessionStorage.removeItem(KEY)
}

/** The typed client of the public API, on this origin, with the signed-in token. */
export function api(token: string): AgentdClient {
  return agentdClient(location.origin, token)
}

/** What an error answer says, in either of the spec's envelopes ({error} or {code, message}). */
export function said(error: unknown, status?: number): string {
  const body = error as { error?: string; message?: string; code?: string; error_code?: string } | undefined
  const text = body?.error ?? body?.message ?? (status ? `The server answered ${status}` : 'The server could not be reached')
  const code = body?.code ?? body?.error_code
  return code && !text.includes(code) ? `${text} (${code})` : text
}
