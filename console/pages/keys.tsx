import { useEffect, useState } from 'preact/hooks'
import { api, said } from '../api'
import { Problem } from '../components'
import type { SignedIn } from '../signed-in'
import { when } from '../when'

interface Key {
  id: string
  name: string
  prefix: string
  scopes: string[]
  max_concurrent: number
  webhook_url: string | null
  expires_at: string | null
  last_used_at: string | null
  created_at: string
}

interface Delivery {
  id: string
  state: string
  reason: string | null
  attempts: unknown[]
  created_at: string
}

/** A secret shown once, with a button that copies it. */
function Secret({ label, value }: { label: string; value: string }) {
  const [copied, setCopied] = useState(false)
  return (
    <div class="secret" role="status">
      <p>{label} It is shown this once: copy it now.</p>
      <code>{value}</code>{' '}
      <button type="button" onClick={() => void navigator.clipboard?.writeText(value).then(() => setCopied(true))}>
        {copied ? 'Copied' : 'Copy'}
      </button>
    </div>
  )
}

/** The org's API keys (admins): create, scopes, limits, expiry, webhook and its secret, deliveries, rotate, revoke; usage against the plan. */
export function Keys({ who }: { who: SignedIn }) {
  const client = api(who.token)
  const org = { org: who.org }
  const [keys, setKeys] = useState<Key[]>([])
  const [usage, setUsage] = useState<{ usage: Record<string, number>; limits: Record<string, number | null> | null } | null>(null)
  const [form, setForm] = useState({ name: '', read: true, write: true, max: '4', expires: '' })
  const [secret, setSecret] = useState<{ label: string; value: string } | null>(null)
  const [deliveries, setDeliveries] = useState<Record<string, Delivery[]>>({})
  const [webhook, setWebhook] = useState<Record<string, string>>({})
  const [problem, setProblem] = useState<string | null>(null)

  const load = async () => {
    const { data, error, response } = await client.GET('/o/{org}/api-keys', { params: { path: org } })
    if (!data) return setProblem(said(error, response.status))
    setKeys(data.data as unknown as Key[])
    const used = await client.GET('/o/{org}/usage', { params: { path: org } })
    if (used.data) setUsage(used.data as unknown as typeof usage)
  }
  useEffect(() => {
    void load()
  }, [who.org, who.token])

  const create = async (event: Event) => {
    event.preventDefault()
    setProblem(null)
    const scopes = [...(form.read ? ['runs:read'] : []), ...(form.write ? ['runs:write'] : [])] as ('runs:read' | 'runs:write')[]
    const body = {
      name: form.name,
      scopes,
      max_concurrent: Number(form.max),
      ...(form.expires ? { expires_at: new Date(form.expires).toISOString() } : {}),
    }
    const { data, error, response } = await client.POST('/o/{org}/api-keys', { params: { path: org }, body })
    if (!data) return setProblem(said(error, response.status))
    setSecret({ label: `The secret of key ${data.name}:`, value: (data as { secret: string }).secret })
    setForm({ ...form, name: '' })
    await load()
  }
  const revoke = async (key: Key) => {
    if (!confirm(`Revoke key ${key.name}? Callers using it are refused at once.`)) return
    const { error, response } = await client.DELETE('/o/{org}/api-keys/{key}', { params: { path: { ...org, key: key.id } } })
    if (!response.ok) return setProblem(said(error, response.status))
    await load()
  }
  const rotate = async (key: Key) => {
    if (!confirm(`Rotate key ${key.name}? Its old secret stops working at once.`)) return
    const { data, error, response } = await client.POST('/o/{org}/api-keys/{key}/rotate', { params: { path: { ...org, key: key.id } } })
    if (!data) return setProblem(said(error, response.status))
    setSecret({ label: `The new secret of key ${key.name}:`, value: (data as { secret: string }).secret })
  }
  const saveWebhook = async (key: Key) => {
    const url = webhook[key.id]?.trim() ?? ''
    const { data, error, response } = await client.PATCH('/o/{org}/api-keys/{key}', {
      params: { path: { ...org, key: key.id } },
      body: { webhook_url: url === '' ? null : url },
    })
    if (!data) return setProblem(said(error, response.status))
    const minted = (data as { webhook_secret?: string }).webhook_secret
    if (minted) setSecret({ label: `The webhook secret of key ${key.name}:`, value: minted })
    await load()
  }
  const showDeliveries = async (key: Key) => {
    const { data } = await client.GET('/o/{org}/api-keys/{key}/deliveries', { params: { path: { ...org, key: key.id }, query: {} } })
    if (data) setDeliveries({ ...deliveries, [key.id]: data.data as unknown as Delivery[] })
  }

  return (
    <section aria-labelledby="keys-title">
      <h1 id="keys-title">API keys</h1>
      {usage && (
        <p class="usage">
          This month: {usage.usage.tokens} tokens{usage.limits?.tokens != null ? ` of ${usage.limits.tokens}` : ''},{' '}
          {usage.usage.compute_minutes?.toFixed(1)} compute minutes
          {usage.limits?.compute_minutes != null ? ` of ${usage.limits.compute_minutes}` : ''}, ${usage.usage.spend_usd?.toFixed(2)} spent
          {usage.limits?.spend_usd != null ? ` of $${usage.limits.spend_usd}` : ''}.
        </p>
      )}
      <form class="new-key" onSubmit={create}>
        <h2>New key</h2>
        <label for="key-name">Name</label>
        <input
          id="key-name"
          required
          maxLength={100}
          value={form.name}
          onInput={(e) => setForm({ ...form, name: e.currentTarget.value })}
        />
        <fieldset>
          <legend>Scopes</legend>
          <label class="inline">
            <input type="checkbox" checked={form.read} onChange={(e) => setForm({ ...form, read: e.currentTarget.checked })} /> runs:read
          </label>
          <label class="inline">
            <input type="checkbox" checked={form.write} onChange={(e) => setForm({ ...form, write: e.currentTarget.checked })} /> runs:write
          </label>
        </fieldset>
        <label for="key-max">Runs at once</label>
        <input
          id="key-max"
          type="number"
          min={1}
          max={100}
          value={form.max}
          onInput={(e) => setForm({ ...form, max: e.currentTarget.value })}
        />
        <label for="key-expires">Expires (optional)</label>
        <input
          id="key-expires"
          type="datetime-local"
          value={form.expires}
          onInput={(e) => setForm({ ...form, expires: e.currentTarget.value })}
        />
        <button type="submit" disabled={form.name.trim() === '' || (!form.read && !form.write)}>
          Create key
        </button>
      </form>
      {secret && <Secret {...secret} />}
      <Problem text={problem} />
      <table class="keys">
        <caption>Live keys</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Key</th>
            <th scope="col">Scopes</th>
            <th scope="col">Runs at once</th>
            <th scope="col">Expires</th>
            <th scope="col">Webhook</th>
            <th scope="col">Actions</th>
          </tr>
        </thead>
        <tbody>
          {keys.map((key) => (
            <tr key={key.id}>
              <th scope="row">{key.name}</th>
              <td>
                <code>{key.prefix}…</code>
              </td>
              <td>{key.scopes.join(', ')}</td>
              <td>{key.max_concurrent}</td>
              <td>{key.expires_at ? when(key.expires_at) : 'never'}</td>
              <td>
                <label class="visually-hidden" for={`webhook-${key.id}`}>
                  Webhook URL of {key.name}
                </label>
                <input
                  id={`webhook-${key.id}`}
                  type="url"
                  placeholder="https://…"
                  value={webhook[key.id] ?? key.webhook_url ?? ''}
                  onInput={(e) => setWebhook({ ...webhook, [key.id]: e.currentTarget.value })}
                />
                <button type="button" onClick={() => saveWebhook(key)}>
                  Save webhook
                </button>
                <button type="button" onClick={() => showDeliveries(key)}>
                  Deliveries
                </button>
                {deliveries[key.id] && (
                  <ul class="deliveries">
                    {deliveries[key.id]!.length === 0 && <li>No deliveries yet.</li>}
                    {deliveries[key.id]!.map((d) => (
                      <li key={d.id}>
                        {d.state} · {d.attempts.length} attempt{d.attempts.length === 1 ? '' : 's'} {d.reason ? `· ${d.reason}` : ''}
                      </li>
                    ))}
                  </ul>
                )}
              </td>
              <td>
                <button type="button" onClick={() => rotate(key)}>
                  Rotate <span class="visually-hidden">{key.name}</span>
                </button>
                <button type="button" class="danger" onClick={() => revoke(key)}>
                  Revoke <span class="visually-hidden">{key.name}</span>
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  )
}
