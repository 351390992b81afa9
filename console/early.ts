/**
 * The page's head script, inlined in the HTML (allowed by its hash in the CSP): when a signed-in
 * tab opens the sessions list, its first page is asked for now, while the app's script is still on
 * its way and being run, instead of after it (issue 20's 300 ms goal). Nothing else: the app reads
 * the answer through its typed client, and a tab that is not signed in or not on the list asks
 * nothing here.
 */
import { firstPageUrl } from './first-page'
import { BASE, isListPath } from './paths'
import { signedIn } from './signed-in'

const who = signedIn()
if (who && isListPath(location.pathname.slice(BASE.length))) {
  const url = firstPageUrl(location.origin, who.org)
  const authorization = `Bearer ${who.token}`
  window.agentdEarly = { url, authorization, response: fetch(url, { headers: { authorization } }) }
}
