import { useEffect, useRef, useState } from 'preact/hooks'
import { api, said } from '../api'
import { JsonTree, Link, Problem, StatusBadge } from '../components'
import { navigate } from '../router'
import { controls, moving } from '../lifecycle'
import { follow, type StreamEvent } from '../stream'
import type { SignedIn } from '../signed-in'

interface Session {
  execution_id: string
  status: string
  persistence_mode: string
  prompt: string
  model: string
  agent: string
  branch: string | null
  pr_url: string | null
  error: string | null
  total_tokens: number | null
  total_cost_usd: number | null
  queue_position: number | null
  forked_from?: { session: string; turn: number }
}

interface Message {
  type: string
  role?: string
  content?: string
  tool?: string
  output?: string
  timestamp: string
}

interface ToolCall {
  call_key: string
  tool: string
  program: string | null
  outcome?: string
  output?: string
  exit_code?: number
}

/** At most this many live events are kept on the page (the rest are in the transcript). */
const SHOWN = 300

/** Messages in turns: a turn starts at each user message (spec 4.3). */
function turns(messages: Message[]): Message[][] {
  const out: Message[][] = []
  for (const m of messages) {
    if (m.type === 'message' && m.role === 'user') out.push([m])
    else (out.at(-1) ?? (out.push([]), out.at(-1)!)).push(m)
  }
  return out
}

/** One session: live events, the turns, tool calls, answer, artifacts, follow-ups and lifecycle controls. */
export function SessionPage({ who, id }: { who: SignedIn; id: string }) {
  const client = api(who.token)
  const path = { org: who.org, project: '_', session: id }
  const [session, setSession] = useState<Session | null>(null)
  const [events, setEvents] = useState<StreamEvent[]>([])
  const [live, setLive] = useState(false)
  const [messages, setMessages] = useState<Message[]>([])
  const [calls, setCalls] = useState<ToolCall[]>([])
  const [answer, setAnswer] = useState<{ text: string | null; structured: unknown } | null>(null)
  const [artifacts, setArtifacts] = useState<{ name: string; size: number; content_type: string }[]>([])
  const [chart, setChart] = useState<string | null>(null)
  const [problem, setProblem] = useState<string | null>(null)
  const [notice, setNotice] = useState<string | null>(null)
  const [followUp, setFollowUp] = useState('')
  const cursor = useRef<string | null>(null)
  const [streamRound, setStreamRound] = useState(0)
  /** The status a control was used in: asked again until it changes (a pause or resume runs in the background). */
  const [awaiting, setAwaiting] = useState<string | null>(null)

  const refresh = async () => {
    const { data, error, response } = await client.GET('/o/{org}/p/{project}/sessions/{session}', { params: { path } })
    if (!data) return setProblem(said(error, response.status))
    setSession(data as unknown as Session)
    const [m, t, r, a] = await Promise.all([
      client.GET('/o/{org}/p/{project}/sessions/{session}/messages', { params: { path } }),
      client.GET('/o/{org}/p/{project}/sessions/{session}/tool-calls', { params: { path } }),
      client.GET('/o/{org}/p/{project}/sessions/{session}/result', { params: { path } }),
      client.GET('/o/{org}/p/{project}/sessions/{session}/artifacts', { params: { path } }),
    ])
    if (m.data) setMessages(m.data.events as unknown as Message[])
    if (t.data) setCalls(t.data.tool_calls as unknown as ToolCall[])
    if (r.data) setAnswer((r.data.result as { text: string | null; structured: unknown } | null) ?? null)
    if (a.data) setArtifacts(a.data.artifacts as unknown as { name: string; size: number; content_type: string }[])
    const page = await fetch(`/statechart?session=${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${who.token}` } })
    if (page.ok) setChart(await page.text())
  }

  useEffect(() => {
    void refresh()
  }, [id, who.token])

  // Without the stream (a session at rest, or one a control just moved), statuses are asked for.
  useEffect(() => {
    if (!session) return
    if (awaiting !== null && session.status !== awaiting) return setAwaiting(null)
    if (awaiting === null && (live || !moving(session.status))) return
    const timer = setTimeout(() => void refresh(), 1000)
    return () => clearTimeout(timer)
  }, [session, awaiting, live])

  // The live stream; a new round (after a follow-up or resume) resumes after the last event seen.
  useEffect(() => {
    const stop = follow(`/o/${encodeURIComponent(who.org)}/p/_/sessions/${encodeURIComponent(id)}/events`, who.token, cursor.current, {
      open: () => setLive(true),
      closed: () => setLive(false),
      event: (event) => {
        if (event.id) cursor.current = event.id
        setEvents((seen) => [...seen, event].slice(-SHOWN))
        if (event.type === 'status') {
          const status = (JSON.parse(event.data) as { status: string }).status
          setSession((s) => (s ? { ...s, status } : s))
        }
        if (event.type === 'done') {
          setLive(false)
          void refresh()
        }
      },
    })
    return stop
  }, [id, who.token, streamRound])

  const change = async (status: 'paused' | 'running' | 'stop_turn' | 'cancelled', question?: string) => {
    if (question && !confirm(question)) return
    setProblem(null)
    const before = session?.status ?? null
    const { data, error, response } = await client.PATCH('/o/{org}/p/{project}/sessions/{session}', { params: { path }, body: { status } })
    if (!data) return setProblem(said(error, response.status))
    if (status !== 'stop_turn') setAwaiting(before)
    setNotice(
      status === 'paused'
        ? 'Pausing…'
        : status === 'running'
          ? 'Resuming…'
          : status === 'stop_turn'
            ? 'The turn was stopped.'
            : 'Cancelled.',
    )
    await refresh()
    if (status === 'running') setStreamRound((n) => n + 1)
  }

  /** A new session from this one's parked sandbox (contract section 13), opened once it is made. */
  const fork = async () => {
    setProblem(null)
    setNotice('Copying the sandbox…')
    const { data, error, response } = await client.POST('/o/{org}/p/{project}/sessions/{session}/fork', { params: { path } })
    setNotice(null)
    if (!data) return setProblem(said(error, response.status))
    navigate(`/sessions/${data.execution_id}`)
  }

  const send = async (event: Event) => {
    event.preventDefault()
    setProblem(null)
    const { data, error, response } = await client.POST('/o/{org}/p/{project}/sessions/{session}/messages', {
      params: { path },
      body: { content: followUp },
    })
    if (!data) return setProblem(said(error, response.status))
    const sent = data as { status: string; position?: number }
    setNotice(
      sent.status === 'queued' ? `Queued: number ${sent.position} in line, delivered when the turn ends.` : 'Sent: a new turn starts.',
    )
    setFollowUp('')
    if (!live) setStreamRound((n) => n + 1)
    await refresh()
  }

  const download = async (name: string) => {
    const res = await fetch(
      `/o/${encodeURIComponent(who.org)}/p/_/sessions/${encodeURIComponent(id)}/artifacts/${encodeURIComponent(name)}`,
      { headers: { authorization: `Bearer ${who.token}` } },
    )
    if (!res.ok) return setProblem(`${name} could not be downloaded (${res.status})`)
    const link = document.createElement('a')
    link.href = URL.createObjectURL(await res.blob())
    link.download = name
    link.click()
    setTimeout(() => URL.revokeObjectURL(link.href), 10_000)
  }

  if (!session) return <Problem text={problem} />
  const can = controls({ status: session.status, persistence: session.persistence_mode })
  return (
    <article aria-labelledby="session-title">
      <header class="session-head">
        <h1 id="session-title">{session.prompt.split('\n')[0]!.slice(0, 120) || id}</h1>
        <p>
          <StatusBadge status={session.status} />{' '}
          <span class="meta">
            {session.agent} · {session.model} · {session.persistence_mode} · {session.total_tokens ?? 0} tokens · $
            {(session.total_cost_usd ?? 0).toFixed(4)}
          </span>
        </p>
        {session.pr_url && (
          <p>
            Pull request: <a href={session.pr_url}>{session.pr_url}</a> ({session.branch})
          </p>
        )}
        {session.error && <p class="problem">{session.error}</p>}
        {session.forked_from && (
          <p>
            Forked from <Link href={`/console/sessions/${session.forked_from.session}`}>{session.forked_from.session.slice(0, 8)}</Link>{' '}
            after its turn {session.forked_from.turn}.
          </p>
        )}
      </header>
      <div class="controls" role="group" aria-label="Session controls">
        <button type="button" disabled={!can.pause} onClick={() => change('paused')}>
          Pause
        </button>
        <button type="button" disabled={!can.resume} onClick={() => change('running')}>
          Resume
        </button>
        <button type="button" disabled={!can.stopTurn} onClick={() => change('stop_turn')}>
          Stop turn
        </button>
        <button type="button" disabled={!can.fork} onClick={() => void fork()}>
          Fork
        </button>
        <button
          type="button"
          class="danger"
          disabled={!can.cancel}
          onClick={() => change('cancelled', 'Cancel this session? It takes nothing more after this.')}
        >
          Cancel session
        </button>
      </div>
      <p class="notice" role="status">
        {notice}
      </p>
      <Problem text={problem} />
      <form class="follow-up" onSubmit={send}>
        <label for="follow-up">Follow-up</label>
        <textarea id="follow-up" rows={3} value={followUp} onInput={(e) => setFollowUp(e.currentTarget.value)} disabled={!can.followUp} />
        <button type="submit" disabled={!can.followUp || followUp.trim() === ''}>
          Send
        </button>
      </form>
      <section aria-labelledby="answer-title">
        <h2 id="answer-title">Answer</h2>
        {answer ? (
          <>
            {answer.text && <p class="answer">{answer.text}</p>}
            {answer.structured !== null && answer.structured !== undefined && <JsonTree value={answer.structured} />}
          </>
        ) : (
          <p>None yet.</p>
        )}
      </section>
      <section aria-labelledby="events-title">
        <h2 id="events-title">
          Live events <span class="meta">({live ? 'following' : 'not following'})</span>
        </h2>
        <ol class="events" aria-live="polite" aria-relevant="additions" tabIndex={0} aria-labelledby="events-title">
          {events.map((e, i) => (
            <li key={`${e.id}-${i}`}>
              <code>{e.type === 'message' ? ((JSON.parse(e.data) as { type?: string }).type ?? 'event') : e.type}</code>{' '}
              {e.data.slice(0, 200)}
            </li>
          ))}
        </ol>
      </section>
      <section aria-labelledby="turns-title">
        <h2 id="turns-title">Turns</h2>
        {turns(messages).map((turn, i) => (
          <details key={i} open={i === turns(messages).length - 1}>
            <summary>Turn {i + 1}</summary>
            <ul class="messages">
              {turn.map((m, j) => (
                <li key={j} class={`message message-${m.role ?? m.type}`}>
                  <strong>{m.role ?? m.type}</strong> {m.content ?? m.output ?? m.tool ?? ''}
                </li>
              ))}
            </ul>
          </details>
        ))}
      </section>
      <section aria-labelledby="tools-title">
        <h2 id="tools-title">Tool calls</h2>
        <table>
          <thead>
            <tr>
              <th scope="col">Tool</th>
              <th scope="col">Program</th>
              <th scope="col">Outcome</th>
              <th scope="col">Output</th>
            </tr>
          </thead>
          <tbody>
            {calls.map((c) => (
              <tr key={c.call_key}>
                <td>{c.tool}</td>
                <td>{c.program ?? '—'}</td>
                <td>{c.outcome ?? '—'}</td>
                <td>
                  <details>
                    <summary>show</summary>
                    <pre tabIndex={0}>{c.output ?? ''}</pre>
                  </details>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
      <section aria-labelledby="artifacts-title">
        <h2 id="artifacts-title">Artifacts</h2>
        <ul>
          {artifacts.map((a) => (
            <li key={a.name}>
              <button type="button" class="link" onClick={() => download(a.name)}>
                {a.name}
              </button>{' '}
              <span class="meta">
                ({a.size} bytes, {a.content_type})
              </span>
            </li>
          ))}
        </ul>
      </section>
      <section aria-labelledby="chart-title">
        <h2 id="chart-title">Lifecycle</h2>
        {chart && <iframe title="This session's path on the lifecycle state chart" class="chart" sandbox="" srcDoc={chart} />}
      </section>
    </article>
  )
}
