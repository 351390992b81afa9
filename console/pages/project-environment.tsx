import { useEffect, useState } from 'preact/hooks'
import type { components } from '../../clients/typescript/index.ts'
import { api, refusal } from '../api'
import { fieldAria, Problem } from '../components'
import type { SignedIn } from '../signed-in'
import { when } from '../when'

type Environment = components['schemas']['ProjectEnvironment']

/** The form's text: the script, the time limit and the allowlist one entry per line. */
const asForm = (env: Environment) => ({ setup: env.setup ?? '', timeout: String(env.setup_timeout_s), allow: env.network.allow.join('\n') })

/** The allowlist's entries, each with the line of the box it was on (a refusal names an entry by its place). */
function entries(text: string): { entry: string; line: number }[] {
  return text
    .split('\n')
    .map((entry, i) => ({ entry: entry.trim(), line: i + 1 }))
    .filter(({ entry }) => entry !== '')
}

/**
 * A Project's environment (admins): the setup script, its time limit and the network allowlist,
 * saved whole with one PUT (absent fields take their defaults, as the API does); its revision and
 * when it was set.
 */
export function ProjectEnvironment({ who, project, forbidden }: { who: SignedIn; project: string; forbidden(): void }) {
  const client = api(who.token)
  const path = { org: who.org, project }
  const [env, setEnv] = useState<Environment | null>(null)
  const [form, setForm] = useState({ setup: '', timeout: '900', allow: '' })
  const [busy, setBusy] = useState(false)
  const [problem, setProblem] = useState<{ text: string; fields: string[] } | null>(null)
  const [notice, setNotice] = useState<string | null>(null)

  useEffect(() => {
    void client.GET('/o/{org}/projects/{project}/environment', { params: { path } }).then(({ data, error, response }) => {
      if (response.status === 403) return forbidden()
      if (!data) return setProblem(refusal(error, response.status))
      setEnv(data)
      setForm(asForm(data))
    })
  }, [who.token, who.org, project])

  const save = async (event: Event) => {
    event.preventDefault()
    setBusy(true)
    setProblem(null)
    setNotice(null)
    const allow = entries(form.allow)
    const body = {
      setup: form.setup.trim() === '' ? null : form.setup,
      ...(form.timeout.trim() === '' ? {} : { setup_timeout_s: Number(form.timeout) }),
      network: { allow: allow.map((a) => a.entry) },
    }
    const { data, error, response } = await client.PUT('/o/{org}/projects/{project}/environment', { params: { path }, body })
    setBusy(false)
    if (response.status === 403) return forbidden()
    if (!data) {
      const refused = refusal(error, response.status)
      // The API names an entry by its place in the list; the box by its line.
      const text = refused.text.replace(
        /^network\.allow\.(\d+):/,
        (_, i: string) => `Allowlist, line ${allow[Number(i)]?.line ?? Number(i) + 1}:`,
      )
      return setProblem({ text, fields: refused.fields })
    }
    setEnv(data)
    setForm(asForm(data))
    setNotice(`Saved: revision ${data.revision}. Sessions started from now on run in it.`)
  }

  const described = (prefix: string, hint?: string) =>
    fieldAria(problem?.fields.some((f) => f === prefix || f.startsWith(`${prefix}.`)) ?? false, 'environment-problem', hint)
  return (
    <section aria-labelledby="environment-title">
      <h2 id="environment-title">Environment</h2>
      {env === null ? (
        problem ? null : (
          <p aria-live="polite">Loading…</p>
        )
      ) : (
        <p class="meta" id="environment-revision">
          {env.updated_at ? (
            <>
              Revision {env.revision}, saved <time dateTime={env.updated_at}>{when(env.updated_at)}</time>.
            </>
          ) : (
            <>Revision {env.revision}: never saved, these are the defaults.</>
          )}
        </p>
      )}
      {env && (
        <form class="environment" onSubmit={save}>
          <label for="env-setup">Setup script</label>
          <textarea
            id="env-setup"
            class="code"
            rows={8}
            spellcheck={false}
            value={form.setup}
            onInput={(e) => setForm({ ...form, setup: e.currentTarget.value })}
            {...described('setup', 'env-setup-hint')}
          />
          <p class="hint" id="env-setup-hint">
            Runs once per sandbox before the first turn, as <code>bash -e</code> in <code>/workspace</code> after the checkout, with the
            secrets and the network below. Exiting with anything but 0 fails the session. A setup that succeeds is kept as a prebuilt image:
            later sessions start from it until the environment, the commit or a secret changes. Empty: no setup.
          </p>
          <label for="env-timeout">Setup time limit (seconds)</label>
          <input
            id="env-timeout"
            type="number"
            min={1}
            max={3600}
            step={1}
            value={form.timeout}
            onInput={(e) => setForm({ ...form, timeout: e.currentTarget.value })}
            {...described('setup_timeout_s')}
          />
          <label for="env-allow">Network allowlist</label>
          <textarea
            id="env-allow"
            class="code"
            rows={5}
            spellcheck={false}
            value={form.allow}
            onInput={(e) => setForm({ ...form, allow: e.currentTarget.value })}
            {...described('network', 'env-allow-hint')}
          />
          <p class="hint" id="env-allow-hint">
            One entry per line: a host name (<code>api.example.com</code>), <code>*.example.com</code> for every name below it, or an IP
            address, each optionally with <code>:port</code> (else 443 and 80); or the word <code>registries</code> for the public package
            registries of npm, PyPI, crates.io, the Go module proxy and Debian. Empty: no network at all.
          </p>
          <button type="submit" disabled={busy}>
            Save environment
          </button>
        </form>
      )}
      <div id="environment-problem">
        <Problem text={problem?.text ?? null} />
      </div>
      <p role="status">{notice}</p>
    </section>
  )
}
