import { useEffect, useState } from 'preact/hooks'
import { BASE } from './paths'

export function navigate(path: string): void {
  history.pushState(null, '', `${BASE}${path}`)
  dispatchEvent(new PopStateEvent('popstate'))
}

/** The path after /console, followed as it changes (links, back and forward). */
export function usePath(): string {
  const read = () => location.pathname.slice(BASE.length) || '/'
  const [path, setPath] = useState(read)
  useEffect(() => {
    const changed = () => setPath(read())
    addEventListener('popstate', changed)
    return () => removeEventListener('popstate', changed)
  }, [])
  return path
}

/** A link that moves inside the console without a page load (a plain link to open elsewhere). */
export function onLink(event: MouseEvent): void {
  const anchor = event.currentTarget as HTMLAnchorElement
  if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || !anchor.pathname.startsWith(BASE)) return
  event.preventDefault()
  navigate(anchor.pathname.slice(BASE.length) + anchor.search)
}
