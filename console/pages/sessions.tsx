import { useLayoutEffect, useRef, useState } from 'preact/hooks'
import { SESSION_STATUSES } from '../../src/domain/status.ts'
import { api, said } from '../api'
import { Link, Problem, StatusBadge, VirtualList } from '../components'
import { FIRST_PAGE } from '../first-page'
import { moving } from '../lifecycle'
import type { SignedIn } from '../signed-in'
import { when } from '../when'

interface Row {
  id: string
  title: string | null
  status: string
  harness: string
  model: string | null
  project: string | null
  cost_usd: number | null
  created_at: string
}

const HARNESSES = ['harness_1', 'harness_2', 'harness_3'] as const
/** The most rows the list holds; past it, the filters narrow it. */
const MAX_ROWS = 5000
const NEXT_PAGE = 200

/** The org's sessions: search with filters and full text, newest first; statuses kept live. */
export function Sessions({ who }: { who: SignedIn }) {
  const [filters, setFilters] = useState({ q: '', status: '', harness: '' })
  const [applied, setApplied] = useState(filters)
  const [rows, setRows] = useState<Row[] | null>(null)
  const [problem, setProblem] = useState<string | null>(null)
  /** Whether this search has shown its rows: a live refresh replaces them whole, never a page at a time. */
  const shown = useRef(false)
  // A layout effect: the first request leaves as the page is drawn, not a frame (or 100 ms) later.
  useLayoutEffect(() => {
    shown.current = false
    let stop = false
    let timer: ReturnType<typeof setTimeout> | undefined
    const load = async () => {
      const query = {
        ...(applied.q ? { q: [applied.q] } : {}),
        ...(applied.status ? { status: applied.status as (typeof SESSION_STATUSES)[number] } : {}),
        ...(applied.harness ? { harness: applied.harness as (typeof HARNESSES)[number] } : {}),
      }
      // Page after page until the cursor ends: the first page shows at once.
      const found: Row[] = []
      let cursor: string | undefined
      do {
        // A small first page draws the list sooner; the rest come 500 at a time.
        const page = cursor ? { limit: NEXT_PAGE, cursor } : { limit: FIRST_PAGE }
        const { data, error, response } = await api(who.token).GET('/o/{org}/sessions', {
          params: { path: { org: who.org }, query: { ...query, ...page } },
        })
        if (stop) return
        if (!data || !('sessions' in data)) return setProblem(said(error, response.status))
        found.push(...(data.sessions as unknown as Row[]))
        if (!shown.current) setRows([...found])
        cursor = (data as { next_cursor?: string | null }).next_cursor ?? undefined
        // The next page is asked once these rows are on screen: its answer then never holds up
        // the frame that draws them, nor the first keys typed after.
        if (cursor && found.length === FIRST_PAGE && !shown.current)
          await new Promise((drawn) => requestAnimationFrame(() => setTimeout(drawn)))
        if (stop) return
      } while (cursor && found.length < MAX_ROWS)
      setProblem(null)
      setRows(found)
      shown.current = true
      // Live: while any is on its way, ask again soon.
      if (found.some((row) => moving(row.status))) timer = setTimeout(load, 2000)
    }
    void load()
    return () => {
      stop = true
      clearTimeout(timer)
    }
  }, [who.token, who.org, applied])
  return (
    <section aria-labelledby="sessions-title">
      <h1 id="sessions-title">Sessions</h1>
      <form
        class="filters"
        role="search"
        onSubmit={(e) => {
          e.preventDefault()
          setApplied(filters)
        }}
      >
        <label>
          Text
          <input type="search" name="q" value={filters.q} onInput={(e) => setFilters({ ...filters, q: e.currentTarget.value })} />
        </label>
        <AnyOf
          label="Status"
          name="status"
          options={SESSION_STATUSES}
          text={(s) => s.replace('_', ' ')}
          value={filters.status}
          onChange={(status) => setFilters({ ...filters, status })}
        />
        <AnyOf
          label="Harness"
          name="harness"
          options={HARNESSES}
          value={filters.harness}
          onChange={(harness) => setFilters({ ...filters, harness })}
        />
        <button type="submit">Search</button>
      </form>
      <Problem text={problem} />
      {rows === null ? (
        <p aria-live="polite">Loading…</p>
      ) : rows.length === 0 ? (
        <p>
          No sessions yet. <Link href="/console/new">Start one</Link>.
        </p>
      ) : (
        <>
          <p class="count" aria-live="polite">
            {rows.length} session{rows.length === 1 ? '' : 's'}
          </p>
          <VirtualList
            items={rows}
            rowHeight={48}
            height={560}
            label="Sessions, newest first"
            row={(row) => (
              <Link href={`/console/sessions/${row.id}`} class="session-row">
                <StatusBadge status={row.status} />
                <span class="title">{row.title ?? row.id}</span>
                <span class="meta">
                  {row.harness} · {row.model ?? 'default model'} · ${(row.cost_usd ?? 0).toFixed(4)} ·{' '}
                  <time dateTime={row.created_at}>{when(row.created_at)}</time>
                </span>
              </Link>
            )}
          />
        </>
      )}
    </section>
  )
}

/** A filter: any, or one of `options`, each shown as `text` says. */
function AnyOf({
  label,
  name,
  options,
  value,
  onChange,
  text = (option) => option,
}: {
  label: string
  name: string
  options: readonly string[]
  value: string
  onChange(value: string): void
  text?(option: string): string
}) {
  return (
    <label>
      {label}
      <select name={name} value={value} onChange={(e) => onChange(e.currentTarget.value)}>
        <option value="">any</option>
        {options.map((option) => (
          <option value={option}>{text(option)}</option>
        ))}
      </select>
    </label>
  )
}
