/**
 * Sign-in at the identity provider: OpenID Connect's authorization-code flow with PKCE (RFC 7636,
 * S256), as a public client. What the callback needs (verifier, state, nonce) waits in this tab's
 * session storage; the ID token that comes back is the console's bearer token (its `aud` is
 * agentd's audience, which is the console's client id).
 */
export interface OidcConfig {
  issuer: string
  clientId: string
}

const PENDING = 'agentd.console.oidc-pending'
/** Where the provider sends the browser back (a console path: the server answers it with the app). */
export const CALLBACK = '/console/signed-in'

const base64url = (bytes: Uint8Array) =>
  btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '')
const random = () => base64url(crypto.getRandomValues(new Uint8Array(32)))

async function discover(issuer: string): Promise<{ authorization_endpoint: string; token_endpoint: string }> {
  const res = await fetch(`${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`)
  if (!res.ok) throw new Error(`the identity provider's discovery answered ${res.status}`)
  return res.json()
}

/** Leaves for the provider's sign-in page. */
export async function beginSignIn(config: OidcConfig): Promise<void> {
  const meta = await discover(config.issuer)
  const verifier = random()
  const challenge = base64url(new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))))
  const state = random()
  const nonce = random()
  sessionStorage.setItem(PENDING, JSON.stringify({ verifier, state, nonce, tokenEndpoint: meta.token_endpoint, clientId: config.clientId }))
  const query = new URLSearchParams({
    response_type: 'code',
    client_id: config.clientId,
    redirect_uri: `${location.origin}${CALLBACK}`,
    scope: 'openid email profile',
    code_challenge: challenge,
    code_challenge_method: 'S256',
    state,
    nonce,
  })
  location.assign(`${meta.authorization_endpoint}?${query}`)
}

/** Back from the provider: the code traded for an ID token (the code leaves the address at once). */
export async function finishSignIn(): Promise<string> {
  const params = new URLSearchParams(location.search)
  history.replaceState(null, '', '/console')
  const pending = JSON.parse(sessionStorage.getItem(PENDING) ?? 'null') as {
    verifier: string
    state: string
    nonce: string
    tokenEndpoint: string
    clientId: string
  } | null
  sessionStorage.removeItem(PENDING)
  if (params.get('error')) throw new Error(`the identity provider said: ${params.get('error_description') ?? params.get('error')}`)
  if (!pending || params.get('state') !== pending.state)
    throw new Error('this sign-in was not started here (its state does not match): start again')
  const res = await fetch(pending.tokenEndpoint, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code: params.get('code') ?? '',
      redirect_uri: `${location.origin}${CALLBACK}`,
      client_id: pending.clientId,
      code_verifier: pending.verifier,
    }),
  })
  const body = (await res.json()) as { id_token?: string; error?: string; error_description?: string }
  if (!res.ok || !body.id_token)
    throw new Error(`the identity provider refused the code: ${body.error_description ?? body.error ?? res.status}`)
  // The nonce ties the token to this sign-in (agentd checks its signature, audience and expiry).
  const claims = JSON.parse(atob(body.id_token.split('.')[1]!.replace(/-/g, '+').replace(/_/g, '/'))) as { nonce?: string }
  if (claims.nonce !== pending.nonce) throw new Error('the ID token is not for this sign-in (nonce)')
  return body.id_token
}
