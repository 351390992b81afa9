import { useEffect, useState } from 'preact/hooks'
import { api, said } from '../api'
import { Link, Problem } from '../components'
import type { SignedIn } from '../signed-in'
import { ProjectEnvironment } from './project-environment'
import { ProjectSecrets } from './project-secrets'
import { ProjectSetupLog } from './project-setup-log'

/**
 * A Project's settings: its secrets and environment (org admins only, as the API rules: a member,
 * or an admin the server answers 403, is told so plainly) and the log of its last setup.
 */
export function ProjectPage({ who, name }: { who: SignedIn; name: string }) {
  const [project, setProject] = useState<{ name: string; repository: string | null } | null>(null)
  const [problem, setProblem] = useState<string | null>(null)
  const [admin, setAdmin] = useState(() => who.orgs.find((o) => o.slug === who.org)?.role === 'admin')

  useEffect(() => {
    void api(who.token)
      .GET('/o/{org}/projects', { params: { path: { org: who.org } } })
      .then(({ data, error, response }) => {
        if (!data) return setProblem(said(error, response.status))
        const found = data.data.find((p) => p.name === name || p.id === name)
        if (!found) return setProblem(`This org has no Project named ${name}.`)
        setProject(found)
      })
  }, [who.token, who.org, name])

  if (!project) {
    return (
      <section aria-labelledby="project-title">
        <h1 id="project-title">Project {name}</h1>
        {problem ? <Problem text={problem} /> : <p aria-live="polite">Loading…</p>}
        <p>
          <Link href="/console/projects">All Projects</Link>
        </p>
      </section>
    )
  }
  const forbidden = () => setAdmin(false)
  return (
    <section aria-labelledby="project-title">
      <h1 id="project-title">Project {project.name}</h1>
      <p class="meta">
        {project.repository ? <>Repository {project.repository}. </> : 'No repository. '}
        <Link href="/console/projects">All Projects</Link>
      </p>
      {admin ? (
        <>
          <ProjectSecrets who={who} project={project.name} forbidden={forbidden} />
          <ProjectEnvironment who={who} project={project.name} forbidden={forbidden} />
        </>
      ) : (
        <p class="notice admins-only" role="note">
          Only org admins can change a Project's environment: its secrets, setup script and network allowlist. Ask an admin of {who.org} to
          change them.
        </p>
      )}
      <ProjectSetupLog who={who} project={project.name} />
    </section>
  )
}
