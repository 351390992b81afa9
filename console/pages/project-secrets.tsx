import { useEffect, useRef, useState } from 'preact/hooks'
import type { components } from '../../clients/typescript/index.ts'
import { api, refusal } from '../api'
import { fieldAria, Problem } from '../components'
import type { SignedIn } from '../signed-in'
import { when } from '../when'

type Secret = components['schemas']['ProjectSecret']

/**
 * A Project's secrets by name (admins): listed with when each was set, made or replaced, removed.
 * A value is typed into a password field that is read once on save and emptied after: it is never
 * in the page's state, never drawn back, and the API never answers with it.
 */
export function ProjectSecrets({ who, project, forbidden }: { who: SignedIn; project: string; forbidden(): void }) {
  const client = api(who.token)
  const [secrets, setSecrets] = useState<Secret[] | null>(null)
  const [name, setName] = useState('')
  const value = useRef<HTMLInputElement>(null)
  const [busy, setBusy] = useState(false)
  const [problem, setProblem] = useState<{ text: string; fields: string[] } | null>(null)
  const [notice, setNotice] = useState<string | null>(null)

  const load = async () => {
    const { data, error, response } = await client.GET('/o/{org}/projects/{project}/secrets', {
      params: { path: { org: who.org, project } },
    })
    if (response.status === 403) return forbidden()
    if (!data) return setProblem(refusal(error, response.status))
    setSecrets(data.data)
  }
  useEffect(() => {
    void load()
  }, [who.token, who.org, project])

  const save = async (event: Event) => {
    event.preventDefault()
    const input = value.current!
    const secret = name.trim()
    setBusy(true)
    setProblem(null)
    setNotice(null)
    const replacing = secrets?.some((s) => s.name === secret) ?? false
    const { error, response } = await client.PUT('/o/{org}/projects/{project}/secrets/{name}', {
      params: { path: { org: who.org, project, name: secret } },
      body: { value: input.value },
    })
    setBusy(false)
    if (response.status === 403) return forbidden()
    if (!response.ok) return setProblem(refusal(error, response.status))
    input.value = ''
    setName('')
    setNotice(`${replacing ? 'Replaced' : 'Added'} ${secret}: sessions started from now on have it.`)
    await load()
  }

  const remove = async (secret: Secret) => {
    if (!confirm(`Delete the secret ${secret.name}? Sessions started from now on no longer have it.`)) return
    setProblem(null)
    setNotice(null)
    const { error, response } = await client.DELETE('/o/{org}/projects/{project}/secrets/{name}', {
      params: { path: { org: who.org, project, name: secret.name } },
    })
    if (response.status === 403) return forbidden()
    if (!response.ok) return setProblem(refusal(error, response.status))
    setNotice(`Deleted ${secret.name}.`)
    await load()
  }

  const described = (field: string, hint?: string) => fieldAria(problem?.fields.includes(field) ?? false, 'secret-problem', hint)
  return (
    <section aria-labelledby="secrets-title">
      <h2 id="secrets-title">Secrets</h2>
      <p class="hint">
        Each secret is an environment variable of its name in the setup script, each turn's CLI and everything they start. Values are sealed
        at rest and never shown again; in what agentd stores about a session, a value reads <code>***</code>.
      </p>
      {secrets === null ? (
        <p aria-live="polite">Loading…</p>
      ) : secrets.length === 0 ? (
        <p>No secrets yet.</p>
      ) : (
        <table class="secrets">
          <caption class="visually-hidden">The Project's secrets, by name</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Updated</th>
              <th scope="col">Actions</th>
            </tr>
          </thead>
          <tbody>
            {secrets.map((s) => (
              <tr key={s.name}>
                <th scope="row">
                  <code>{s.name}</code>
                </th>
                <td>
                  <time dateTime={s.updated_at}>{when(s.updated_at)}</time>
                </td>
                <td>
                  <button type="button" class="danger" onClick={() => remove(s)}>
                    Delete <span class="visually-hidden">{s.name}</span>
                  </button>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <form class="secret-form" onSubmit={save}>
        <h3>Add or replace a secret</h3>
        <label for="secret-name">Name</label>
        <input
          id="secret-name"
          class="code"
          required
          maxLength={128}
          autoComplete="off"
          spellcheck={false}
          value={name}
          onInput={(e) => setName(e.currentTarget.value)}
          {...described('name', 'secret-name-hint')}
        />
        <p class="hint" id="secret-name-hint">
          Capital letters, digits and <code>_</code>, not starting with a digit; not a variable agentd sets (<code>PATH</code>,{' '}
          <code>HOME</code>, <code>AGENTD_…</code>, proxies…). The same name replaces the value.
        </p>
        <label for="secret-value">Value</label>
        <input id="secret-value" ref={value} type="password" required autoComplete="new-password" {...described('value')} />
        <button type="submit" disabled={busy || name.trim() === ''}>
          Save secret
        </button>
      </form>
      <div id="secret-problem">
        <Problem text={problem?.text ?? null} />
      </div>
      <p role="status">{notice}</p>
    </section>
  )
}
