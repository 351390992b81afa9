import { useState } from 'preact/hooks'
import { api, keep, said, type SignedIn } from '../api'
import { Problem } from '../components'

/** Sign in by pasting a signed-in token (`npm run admin -- user token`); it is kept in this tab only. */
export function SignIn({ done }: { done(who: SignedIn): void }) {
  const [token, setToken] = useState('')
  const [problem, setProblem] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  const submit = async (event: Event) => {
    event.preventDefault()
    setBusy(true)
    setProblem(null)
    const { data, error, response } = await api(token.trim()).GET('/me', {}).catch(() => ({ data: undefined, error: undefined, response: undefined }))
    setBusy(false)
    if (!data) return setProblem(said(error, response?.status))
    if (data.orgs.length === 0) return setProblem('This token belongs to no org: ask an admin to add you to one.')
    const who: SignedIn = { token: token.trim(), email: data.email, orgs: data.orgs, org: data.orgs[0]!.slug }
    keep(who)
    done(who)
  }
  return (
    <section class="sign-in" aria-labelledby="sign-in-title">
      <h1 id="sign-in-title">Sign in to agentd</h1>
      <form onSubmit={submit}>
        <label for="token">Your token</label>
        <input id="token" name="token" type="password" autoComplete="off" required value={token} onInput={(e) => setToken(e.currentTarget.value)} />
        <p class="hint">A signed-in user token (agt_…); it stays in this tab and is forgotten when the tab closes.</p>
        <button type="submit" disabled={busy || token.trim() === ''}>
          Sign in
        </button>
      </form>
      <Problem text={problem} />
    </section>
  )
}
