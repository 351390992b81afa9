import { render } from 'preact'
import { useErrorBoundary, useState } from 'preact/hooks'
import { Link } from './components'
import { ConnectionCallback, Connections } from './pages/connections'
import { Keys } from './pages/keys'
import { NewSession } from './pages/new-session'
import { ProjectPage } from './pages/project'
import { Projects } from './pages/projects'
import { SessionPage } from './pages/session'
import { Sessions } from './pages/sessions'
import { SignIn } from './pages/sign-in'
import { navigate, usePath } from './router'
import { keep, signedIn, signOut, type SignedIn } from './signed-in'
import './style.css'

/** The page a path shows (under /console); a page that breaks says so instead of going blank. */
function Page({ who, path }: { who: SignedIn; path: string }) {
  const [broken] = useErrorBoundary()
  if (broken) {
    return (
      <p class="problem" role="alert">
        This page broke: {String((broken as Error).message ?? broken)}. Reload to try again.
      </p>
    )
  }
  return <Route who={who} path={path} />
}

function Route({ who, path }: { who: SignedIn; path: string }) {
  const session = /^\/sessions\/([^/]+)$/.exec(path)
  if (session) return <SessionPage who={who} id={decodeURIComponent(session[1]!)} />
  const project = /^\/projects\/([^/]+)$/.exec(path)
  if (project) return <ProjectPage who={who} name={decodeURIComponent(project[1]!)} />
  if (path === '/projects') return <Projects who={who} />
  if (path === '/new') return <NewSession who={who} />
  if (path === '/keys') return <Keys who={who} />
  if (path === '/connections') return <Connections who={who} />
  if (path === '/connections/callback') return <ConnectionCallback who={who} />
  return <Sessions who={who} />
}

function Console() {
  const [who, setWho] = useState(signedIn)
  const path = usePath()
  /** A navigation link, current on its own path and on the pages `under` it. */
  const nav = (href: string, label: string, under?: string) => (
    <li>
      <Link href={`/console${href}`} aria-current={path === href || (under !== undefined && path.startsWith(under)) ? 'page' : undefined}>
        {label}
      </Link>
    </li>
  )
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">agentd</span>
        {who && (
          <nav aria-label="Console">
            <ul>
              {nav('/', 'Sessions', '/sessions')}
              {nav('/new', 'New session')}
              {nav('/projects', 'Projects', '/projects/')}
              {nav('/connections', 'Connections', '/connections/')}
              {nav('/keys', 'API keys')}
            </ul>
          </nav>
        )}
        {who && (
          <div class="who">
            <label for="org">Org</label>
            <select
              id="org"
              value={who.org}
              onChange={(e) => {
                const next = { ...who, org: e.currentTarget.value }
                keep(next)
                setWho(next)
              }}
            >
              {who.orgs.map((o) => (
                <option value={o.slug}>
                  {o.slug} ({o.role})
                </option>
              ))}
            </select>
            <span class="meta">{who.email}</span>
            <button
              type="button"
              onClick={() => {
                signOut()
                setWho(null)
                navigate('/')
              }}
            >
              Sign out
            </button>
          </div>
        )}
      </header>
      <main id="main" tabIndex={-1}>
        {who ? <Page who={who} path={path} key={`${who.org} ${path}`} /> : <SignIn done={setWho} />}
      </main>
    </>
  )
}

render(<Console />, document.getElementById('app')!)
// The head script's early answer is taken by the list's first draw, just now, or never: later it
// would be stale.
window.agentdEarly = undefined
