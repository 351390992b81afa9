import { useEffect, useMemo, useState } from 'preact/hooks'
import { api, said } from '../api'
import { Problem } from '../components'
import { navigate } from '../router'
import type { SignedIn } from '../signed-in'

interface HarnessRow {
  id: string
  display_name: string
  models: { id: string; display_name: string; effort: string[] }[]
}

/** The schema box's text as a JSON Schema object, or what is wrong with it (the server checks it again). */
function schemaOf(text: string): { schema?: Record<string, unknown>; problem?: string } {
  if (text.trim() === '') return {}
  try {
    const value = JSON.parse(text) as unknown
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      return { problem: 'The output schema must be a JSON object (a JSON Schema).' }
    return { schema: value as Record<string, unknown> }
  } catch (err) {
    return { problem: `The output schema is not JSON: ${(err as Error).message}` }
  }
}

/** Start a session: harness, model and effort from the discovery catalog; persistence, mode, output schema, attachments. */
export function NewSession({ who }: { who: SignedIn }) {
  const client = api(who.token)
  const [harnesses, setHarnesses] = useState<HarnessRow[]>([])
  const [form, setForm] = useState({
    harness: '',
    model: '',
    effort: '',
    persistence: 'resumable',
    mode: 'headless',
    prompt: '',
    schema: '',
  })
  const [files, setFiles] = useState<File[]>([])
  const [problem, setProblem] = useState<string | null>(null)
  const [busy, setBusy] = useState(false)
  useEffect(() => {
    void client.GET('/o/{org}/agents/available', { params: { path: { org: who.org }, query: {} } }).then(({ data, error, response }) => {
      if (!data) return setProblem(said(error, response.status))
      const rows = data.harnesses as unknown as HarnessRow[]
      setHarnesses(rows)
      setForm((f) => ({ ...f, harness: f.harness || rows[0]?.id || '' }))
    })
  }, [who.org, who.token])
  const harness = harnesses.find((h) => h.id === form.harness)
  const model = harness?.models.find((m) => m.id === form.model)
  const schema = useMemo(() => schemaOf(form.schema), [form.schema])
  const set = (field: keyof typeof form) => (e: Event) =>
    setForm({
      ...form,
      [field]: (e.currentTarget as HTMLInputElement).value,
      ...(field === 'harness' ? { model: '', effort: '' } : field === 'model' ? { effort: '' } : {}),
    })

  const submit = async (event: Event) => {
    event.preventDefault()
    if (schema.problem) return setProblem(schema.problem)
    setBusy(true)
    setProblem(null)
    try {
      const common = { ...(form.model ? { model: form.model } : {}), ...(form.effort ? { effort: form.effort as 'low' } : {}) }
      let body: Record<string, unknown>
      if (files.length > 0) {
        // Attachments go up first, then the run names them (shape B file blocks).
        const blocks: unknown[] = [{ type: 'text', text: form.prompt }]
        for (const file of files) {
          // multipart/form-data, one `file` part: the browser's FormData, as the route takes it.
          const parts = new FormData()
          parts.append('file', file)
          const { data, error, response } = await client.POST('/o/{org}/files', {
            params: { path: { org: who.org } },
            body: parts as never,
            bodySerializer: (body: unknown) => body as FormData,
          })
          if (!data) return setProblem(`${file.name}: ${said(error, response.status)}`)
          blocks.push({ type: 'file', source: { type: 'file', file_id: (data as { id: string }).id } })
        }
        body = { harness: form.harness, input: blocks, ...common }
      } else {
        body = {
          agent: form.harness,
          prompt: form.prompt,
          persistence: form.persistence,
          mode: form.mode,
          ...common,
          ...(schema.schema ? { output_schema: schema.schema } : {}),
        }
      }
      const { data, error, response } = await client.POST('/o/{org}/p/{project}/sessions', {
        params: { path: { org: who.org, project: '_' } },
        body: body as never,
      })
      if (!data) return setProblem(said(error, response.status))
      navigate(`/sessions/${(data as { execution_id: string }).execution_id}`)
    } finally {
      setBusy(false)
    }
  }

  return (
    <section aria-labelledby="new-title">
      <h1 id="new-title">Start a session</h1>
      <form class="new-session" onSubmit={submit}>
        <label for="harness">Harness</label>
        <select id="harness" value={form.harness} onChange={set('harness')}>
          {harnesses.map((h) => (
            <option value={h.id}>
              {h.display_name} ({h.id})
            </option>
          ))}
        </select>
        <label for="model">Model</label>
        <select id="model" value={form.model} onChange={set('model')}>
          <option value="">the harness's default</option>
          {harness?.models.map((m) => (
            <option value={m.id}>{m.display_name}</option>
          ))}
        </select>
        <label for="effort">Effort</label>
        <select id="effort" value={form.effort} onChange={set('effort')} disabled={!model}>
          <option value="">default</option>
          {model?.effort.map((e) => (
            <option value={e}>{e}</option>
          ))}
        </select>
        <Choice
          legend="Persistence"
          name="persistence"
          options={['resumable', 'ephemeral']}
          value={form.persistence}
          onChange={set('persistence')}
        />
        <Choice legend="Mode" name="mode" options={['headless', 'interactive']} value={form.mode} onChange={set('mode')} />
        <label for="prompt">Prompt</label>
        <textarea id="prompt" rows={8} required value={form.prompt} onInput={set('prompt')} />
        <label for="schema">Output schema (JSON Schema, optional)</label>
        <textarea
          id="schema"
          rows={5}
          class="code"
          value={form.schema}
          onInput={set('schema')}
          aria-invalid={schema.problem ? 'true' : 'false'}
          aria-describedby="schema-check"
        />
        <p id="schema-check" class={schema.problem ? 'problem' : 'hint'}>
          {schema.problem ?? (schema.schema ? 'Valid JSON: the server checks it as a JSON Schema.' : 'Leave empty for a text answer.')}
        </p>
        <label for="attachments">Attachments</label>
        <input id="attachments" type="file" multiple onChange={(e) => setFiles([...(e.currentTarget.files ?? [])])} />
        <button type="submit" disabled={busy || form.prompt.trim() === '' || !form.harness}>
          Start
        </button>
      </form>
      <Problem text={problem} />
    </section>
  )
}

/** One of a few values, as radio buttons under a legend. */
function Choice({
  legend,
  name,
  options,
  value,
  onChange,
}: {
  legend: string
  name: string
  options: string[]
  value: string
  onChange(e: Event): void
}) {
  return (
    <fieldset>
      <legend>{legend}</legend>
      {options.map((option) => (
        <label class="inline">
          <input type="radio" name={name} value={option} checked={value === option} onChange={onChange} /> {option}
        </label>
      ))}
    </fieldset>
  )
}
