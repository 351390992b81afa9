import { useEffect, useState } from 'preact/hooks'
import { statusIn } from '../../src/domain/status.ts'
import { api, said } from '../api'
import { Link, Problem, StatusBadge } from '../components'
import { setupLines } from '../setup-log'
import type { SignedIn } from '../signed-in'
import { when } from '../when'

/** How many of the Project's newest sessions are looked through for a setup. */
const LOOKED_AT = 5

interface Found {
  id: string
  status: string
  error: string | null
  created_at: string
  lines: string[]
}

/**
 * The Project's last setup: the newest of its few newest sessions whose log has setup lines, those
 * lines, and a link to that session. Looked at again every few seconds while the newest session is
 * still starting or running (its setup may be under way), and on demand.
 */
export function ProjectSetupLog({ who, project }: { who: SignedIn; project: string }) {
  const [found, setFound] = useState<Found | 'none' | null>(null)
  const [problem, setProblem] = useState<string | null>(null)
  const [round, setRound] = useState(0)

  useEffect(() => {
    const client = api(who.token)
    const path = { org: who.org, project }
    let stop = false
    let timer: ReturnType<typeof setTimeout> | undefined
    const look = async () => {
      const { data, error, response } = await client.GET('/o/{org}/p/{project}/sessions', { params: { path, query: { limit: LOOKED_AT } } })
      if (stop) return
      if (!data) return setProblem(said(error, response.status))
      let hit: Found | null = null
      // One after the other, newest first: the first with setup lines ends the search.
      for (const session of data.executions) {
        const logs = await client.GET('/o/{org}/p/{project}/sessions/{session}/logs', {
          params: { path: { ...path, session: session.execution_id } },
        })
        if (stop) return
        const lines = logs.data ? setupLines(logs.data.logs) : []
        if (lines.length > 0) {
          hit = { id: session.execution_id, status: session.status, error: session.error, created_at: session.created_at, lines }
          break
        }
      }
      setProblem(null)
      setFound(hit ?? 'none')
      const newest = data.executions[0]
      if (newest && (newest.status === 'queued' || statusIn('active', newest.status))) timer = setTimeout(look, 2000)
    }
    void look()
    return () => {
      stop = true
      clearTimeout(timer)
    }
  }, [who.token, who.org, project, round])

  return (
    <section aria-labelledby="setup-log-title">
      <h2 id="setup-log-title">Last setup</h2>
      <Problem text={problem} />
      {found === null ? (
        !problem && <p aria-live="polite">Looking…</p>
      ) : found === 'none' ? (
        <p>No setup has run yet in this Project's {LOOKED_AT} newest sessions.</p>
      ) : (
        <>
          <p>
            In session{' '}
            <Link href={`/console/sessions/${encodeURIComponent(found.id)}`}>
              <code>{found.id}</code>
            </Link>
            , started <time dateTime={found.created_at}>{when(found.created_at)}</time>: <StatusBadge status={found.status} />
          </p>
          {found.error && <p class="problem">{found.error}</p>}
          <pre class="setup-log" tabIndex={0} aria-label="The setup's lines from that session's log">
            {found.lines.join('\n')}
          </pre>
        </>
      )}
      <button type="button" onClick={() => setRound((n) => n + 1)}>
        Look again
      </button>
    </section>
  )
}
