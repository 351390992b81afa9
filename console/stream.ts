import { EventSource } from 'eventsource'

export interface StreamEvent {
  id: string
  type: string
  data: string
}

/**
 * A session's event stream (spec 6.1) through the WHATWG EventSource of the `eventsource`
 * package, whose fetch can carry the Authorization header a browser's own cannot. It reconnects by
 * itself with `Last-Event-ID`, and stops for good on the JSON answer (not an event stream) the server
 * gives once the session rests with nothing after that id. `after` resumes a stream seen before.
 */
export function follow(
  url: string,
  token: string,
  after: string | null,
  on: { event(event: StreamEvent): void; open?(): void; closed?(): void },
): () => void {
  const target = new URL(url, location.origin)
  if (after) target.searchParams.set('cursor', after)
  const source = new EventSource(target.href, {
    fetch: (input, init) => fetch(input, { ...init, headers: { ...init?.headers, authorization: `Bearer ${token}` } }),
  })
  // Status events are named `status`; the harness's own go unnamed (`message`), their type in the data.
  const forward = (type: string) => (message: MessageEvent) => on.event({ id: message.lastEventId, type, data: String(message.data) })
  source.addEventListener('status', forward('status') as EventListener)
  source.addEventListener('done', forward('done') as EventListener)
  source.onmessage = forward('message')
  source.onopen = () => on.open?.()
  source.addEventListener('error', (event) => {
    // The stream's own `error` event carries data; a connection error does not.
    if ('data' in event && (event as MessageEvent).data !== undefined) forward('error')(event as MessageEvent)
    else if (source.readyState === EventSource.CLOSED) on.closed?.()
  })
  return () => source.close()
}
