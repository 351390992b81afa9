import { useEffect, useState } from 'preact/hooks'
import type { paths } from '../../clients/typescript/index.ts'
import { api, said } from '../api'
import { Link, Problem } from '../components'
import type { SignedIn } from '../signed-in'
import { when } from '../when'

type Project = paths['/o/{org}/projects']['get']['responses'][200]['content']['application/json']['data'][number]

/** The org's Projects, each linking to its settings (its secrets, setup and network). */
export function Projects({ who }: { who: SignedIn }) {
  const [projects, setProjects] = useState<Project[] | null>(null)
  const [problem, setProblem] = useState<string | null>(null)
  useEffect(() => {
    void api(who.token)
      .GET('/o/{org}/projects', { params: { path: { org: who.org } } })
      .then(({ data, error, response }) => (data ? setProjects(data.data) : setProblem(said(error, response.status))))
  }, [who.token, who.org])
  return (
    <section aria-labelledby="projects-title">
      <h1 id="projects-title">Projects</h1>
      <p class="hint">A Project's sessions run in its environment: its secrets, its setup script and the hosts its sandboxes may reach.</p>
      <Problem text={problem} />
      {projects === null ? (
        !problem && <p aria-live="polite">Loading…</p>
      ) : projects.length === 0 ? (
        <p>
          This org has no Projects yet. An admin makes one with <code>agentd admin project create</code>.
        </p>
      ) : (
        <table>
          <caption class="visually-hidden">The org's Projects, by name</caption>
          <thead>
            <tr>
              <th scope="col">Project</th>
              <th scope="col">Repository</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {projects.map((p) => (
              <tr key={p.id}>
                <th scope="row">
                  <Link href={`/console/projects/${encodeURIComponent(p.name)}`}>
                    {p.name} <span class="visually-hidden">settings</span>
                  </Link>
                </th>
                <td>{p.repository ?? <span class="meta">none</span>}</td>
                <td>
                  <time dateTime={p.created_at}>{when(p.created_at)}</time>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
