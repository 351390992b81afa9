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
