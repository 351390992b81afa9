/**
 * The list page's first request, shared by the page's head script (`early.ts`), which sends it
 * before the app's script has even arrived, and the list itself, whose typed client takes that
 * answer instead of asking again (see `earlyFetch`).
 */

/** The first page of the list: small, so it is drawn soon; the rest follow in larger pages. */
export const FIRST_PAGE = 50

/** Where the list's first, unfiltered page is asked: the same URL the typed client builds for it. */
export function firstPageUrl(origin: string, org: string): string {
  return `${origin}/o/${encodeURIComponent(org)}/sessions?limit=${FIRST_PAGE}`
}

/** The head script's request in flight: its URL, the token it carries, and its answer to come. */
export interface EarlyRequest {
  url: string
  authorization: string
  response: Promise<Response>
}

declare global {
  interface Window {
    agentdEarly?: EarlyRequest
  }
}
