/** Pure parts of a create's inline tool server entries (spec 4.1 rule 3): their token and default name. */
import { badRequest } from '../domain/errors'

/** An inline server's token: `auth` is `{mode: bearer, token}`, `{mode: none}`, or absent. */
export function authToken(auth: unknown, index: number): string | null {
  if (auth === undefined) return null
  const a = auth as { mode?: unknown; token?: unknown }
  if (a && a.mode === 'none' && Object.keys(a).length === 1) return null
  if (a && a.mode === 'bearer' && typeof a.token === 'string' && a.token !== '' && Object.keys(a).length === 2) return a.token
  throw badRequest(`connections[${index}]: auth must be {mode: "bearer", token} or {mode: "none"}`)
}

/** The default name of an inline server: its host as a slug (`mcp.example.com` → `mcp-example-com`). */
export function slugOf(raw: string): string {
  return (
    new URL(raw).hostname
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, '-')
      .replace(/^-+|-+$/g, '')
      .slice(0, 63) || 'server'
  )
}
