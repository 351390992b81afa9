import { useEffect, useState } from 'preact/hooks'
import { api, said } from '../api'
import { Problem } from '../components'
import { beginSignIn, CALLBACK, finishSignIn, type OidcConfig } from '../oidc'
import { keep, type SignedIn } from '../signed-in'

/**
 * Sign in with the identity provider (when agentd has one) or by pasting a signed-in token (`npm
 * run admin -- user token`); either is kept in this tab only.
 */
export function SignIn({ done }: { done(who: SignedIn): void }) {
  const [token, setToken] = useState('')
  const [problem, setProblem] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const [oidc, setOidc] = useState<OidcConfig | null>(null)
  const enter = async (bearer: string) => {
    const { data, error, response } = await api(bearer)
      .GET('/me', {})
      .catch(() => ({ data: undefined, error: undefined, response: undefined }))
    if (!data) return setProblem(said(error, response?.status))
    if (data.orgs.length === 0) return setProblem('You belong to no org yet: ask an admin to add you to one.')
    const who: SignedIn = { token: bearer, email: data.email, orgs: data.orgs, org: data.orgs[0]!.slug }
    keep(who)
    done(who)
  }
  useEffect(() => {
    void fetch('/console/config.json').then(async (res) => setOidc(((await res.json()) as { oidc: OidcConfig | null }).oidc))
    // Back from the provider.
    if (location.pathname === CALLBACK) {
      setBusy(true)
      finishSignIn()
        .then(enter, (err: Error) => setProblem(err.message))
        .finally(() => setBusy(false))
    }
  }, [])
  const submit = async (event: Event) => {
    event.preventDefault()
    setBusy(true)
    setProblem(null)
    await enter(token.trim())
    setBusy(false)
  }
  return (
    <section class="sign-in" aria-labelledby="sign-in-title">
      <h1 id="sign-in-title">Sign in to agentd</h1>
      {oidc && (
        <p>
          <button type="button" disabled={busy} onClick={() => void beginSignIn(oidc).catch((err: Error) => setProblem(err.message))}>
            Sign in with {new URL(oidc.issuer).host}
          </button>
        </p>
      )}
      <form onSubmit={submit}>
        <label for="token">Your token</label>
        <input
          id="token"
          name="token"
          type="password"
          autoComplete="off"
          required
          value={token}
          onInput={(e) => setToken(e.currentTarget.value)}
        />
        <p class="hint">A signed-in user token (agt_…); it stays in this tab and is forgotten when the tab closes.</p>
        <button type="submit" disabled={busy || token.trim() === ''}>
          Sign in
        </button>
      </form>
      <Problem text={problem} />
    </section>
  )
}
