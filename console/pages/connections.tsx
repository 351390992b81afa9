import { useEffect, useState } from 'preact/hooks'
import type { paths } from '../../clients/typescript/index.ts'
import { api, said } from '../api'
import { Link, Problem, StatusBadge } from '../components'
import type { SignedIn } from '../signed-in'

type Connection = paths['/o/{org}/connections']['get']['responses'][200]['content']['application/json']['data'][number]

/** A catalog connector as discovery lists it (`mcp_servers`): the ones with `oauth` are signed in to. */
interface CatalogConnector {
  slug: string
  title?: string
  name?: string
  description?: string
  oauth?: boolean
}

/**
 * The caller's connections (tool servers and built-in connectors) and the catalog's built-in
 * connectors, each with a Connect button: it sends the browser to the connector's sign-in, which
 * comes back to the callback page below.
 */
export function Connections({ who }: { who: SignedIn }) {
  const client = api(who.token)
  const org = { org: who.org }
  const [mine, setMine] = useState<Connection[] | null>(null)
  const [catalog, setCatalog] = useState<CatalogConnector[]>([])
  const [problem, setProblem] = useState<string | null>(null)
  const [busy, setBusy] = useState<string | null>(null)

  useEffect(() => {
    void client.GET('/o/{org}/connections', { params: { path: org } }).then(({ data, error, response }) => {
      if (data) setMine(data.data)
      else setProblem(said(error, response.status))
    })
    void client.GET('/o/{org}/agents/available', { params: { path: org } }).then(({ data }) => {
      const servers = ((data as { mcp_servers?: CatalogConnector[] } | undefined)?.mcp_servers ?? []).filter((s) => s.oauth === true)
      setCatalog(servers)
    })
  }, [who.token, who.org])

  /** To the authorization server: the sign-in page the answer names. */
  const signIn = async (
    what: string,
    ask: () => Promise<{ data?: { authorization_url: string }; error?: unknown; response: Response }>,
  ) => {
    setBusy(what)
    setProblem(null)
    const { data, error, response } = await ask()
    if (data) location.assign(data.authorization_url)
    else {
      setBusy(null)
      setProblem(said(error, response.status))
    }
  }
  const connect = (slug: string) =>
    signIn(slug, async () => {
      const res = await client.POST('/o/{org}/connections', { params: { path: org }, body: { connector: slug } })
      return { ...res, data: res.data && 'authorization_url' in res.data ? res.data : undefined }
    })
  const again = (id: string) =>
    signIn(id, () => client.POST('/o/{org}/connections/{connection}/sign-in', { params: { path: { ...org, connection: id } } }))

  return (
    <section aria-labelledby="connections-title">
      <h1 id="connections-title">Connections</h1>
      <p class="hint">Tool servers your runs can name. A built-in connector is signed in to once; its tokens stay on the server.</p>
      <Problem text={problem} />
      <h2>Built-in connectors</h2>
      {catalog.length === 0 ? (
        <p>This server's catalog has no built-in connectors.</p>
      ) : (
        <ul class="connectors">
          {catalog.map((c) => (
            <li key={c.slug}>
              <strong>{c.title ?? c.name ?? c.slug}</strong> {c.description && <span class="meta">{c.description}</span>}{' '}
              <button type="button" disabled={busy !== null} onClick={() => void connect(c.slug)}>
                Connect <span class="visually-hidden">{c.title ?? c.slug}</span>
              </button>
            </li>
          ))}
        </ul>
      )}
      <h2>Your connections</h2>
      {mine === null ? (
        !problem && <p aria-live="polite">Loading…</p>
      ) : mine.length === 0 ? (
        <p>You have no connections in this org yet.</p>
      ) : (
        <table>
          <caption class="visually-hidden">Your connections, by name</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Sign-in</th>
              <th scope="col">Status</th>
              <th scope="col">
                <span class="visually-hidden">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {mine.map((c) => (
              <tr key={c.id}>
                <th scope="row">{c.name}</th>
                <td>{c.auth_mode === 'oauth' ? `connector ${c.connector}` : c.auth_mode}</td>
                <td>
                  <StatusBadge status={c.status} />
                </td>
                <td>
                  {c.auth_mode === 'oauth' && c.status !== 'ready' && (
                    <button type="button" disabled={busy !== null} onClick={() => void again(c.id)}>
                      Sign in again <span class="visually-hidden">to {c.name}</span>
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}

/**
 * Where a connector's sign-in comes back (`?state&code`): both go to the API as the signed-in
 * user, who must be the one who started it; the address is cleared of them at once.
 */
export function ConnectionCallback({ who }: { who: SignedIn }) {
  const [done, setDone] = useState<Connection | null>(null)
  const [problem, setProblem] = useState<string | null>(null)
  useEffect(() => {
    const query = new URLSearchParams(location.search)
    history.replaceState(null, '', location.pathname)
    const state = query.get('state')
    const code = query.get('code')
    if (query.get('error')) return setProblem(`The sign-in was not given: ${query.get('error_description') ?? query.get('error')}`)
    if (!state || !code) return setProblem('This address carries no sign-in to finish.')
    void api(who.token)
      .POST('/o/{org}/connections/callback', { params: { path: { org: who.org } }, body: { state, code } })
      .then(({ data, error, response }) => (data ? setDone(data) : setProblem(said(error, response.status))))
  }, [])
  return (
    <section aria-labelledby="callback-title">
      <h1 id="callback-title">Connecting</h1>
      <Problem text={problem} />
      {done && (
        <p role="status">
          {done.name} is connected: <StatusBadge status={done.status} />
        </p>
      )}
      {!done && !problem && <p aria-live="polite">Finishing the sign-in…</p>}
      <p>
        <Link href="/console/connections">Back to your connections</Link>
      </p>
    </section>
  )
}
