import { afterAll, beforeAll, expect, test } from 'bun:test'
import { EventSource } from 'eventsource'
import { launchChromium } from '../helpers/chromium'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * Standard EventSource clients on a finished session: the stream replays every event and `done`,
 * the server closes it, the client reconnects with Last-Event-ID (as the standard has it do after
 * any close), and that reconnect, past the end of a session at rest, is a 200 in JSON (not an
 * event stream: the spec lists 200, 401 and 404 here), which stops it for good.
 * Before, each reconnect got `done` (and the status events) again, for ever.
 */
let t: TestApp
let base: string
let id: string
let lastId: string
beforeAll(async () => {
  t = await makeTestApp()
  base = t.listen()
  id = (
    await json(
      await t.app.handle(
        req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_2', prompt: script([{ answer: 'fine' }]) } }),
      ),
    )
  ).execution_id
  await waitFor(
    async () => t.store.get(id)!.status,
    (s) => s === 'completed',
    60_000,
  )
  lastId = String(
    t.store
      .allEvents(id)
      .filter((e) => e.kind !== 'log')
      .at(-1)!.seq,
  )
})
afterAll(() => t[Symbol.asyncDispose]())

const eventsUrl = () => `${base}/o/acme/p/_/sessions/${id}/events`

test('the eventsource package: every event once, one done, then its reconnect is a 200 in JSON and it stops for good', async () => {
  const requests: { lastEventId: string | null; status: number }[] = []
  const source = new EventSource(eventsUrl(), {
    fetch: async (input, init) => {
      const headers = new Headers(init?.headers)
      headers.set('authorization', `Bearer ${t.admin.token}`)
      const res = await fetch(input, { ...init, headers })
      requests.push({ lastEventId: headers.get('last-event-id'), status: res.status })
      return res
    },
  })
  const statuses: string[] = []
  let dones = 0
  source.addEventListener('status', (e) => statuses.push(JSON.parse(e.data).status))
  source.addEventListener('done', () => dones++)
  await waitFor(
    async () => source.readyState,
    (state) => state === EventSource.CLOSED,
    20_000,
  )
  expect(requests).toEqual([
    { lastEventId: null, status: 200 },
    { lastEventId: lastId, status: 200 },
  ])
  expect(statuses).toEqual(['queued', 'allocating', 'running', 'completed'])
  expect(dones).toBe(1)
})

test("a browser's own EventSource (headless Chromium) stops after that answer too", async () => {
  const { browser, close } = await launchChromium()
  try {
    const page = await browser.newPage()
    // Every request of the page carries the token, the stream's too (a page of the console would read it with fetch).
    await page.setExtraHTTPHeaders({ authorization: `Bearer ${t.admin.token}` })
    const answers: { lastEventId: string | null; status: number }[] = []
    page.on('response', async (res) => {
      if (res.url().endsWith('/events'))
        answers.push({ lastEventId: (await res.request().allHeaders())['last-event-id'] ?? null, status: res.status() })
    })
    await page.goto(`${base}/healthz`)
    const seen = await page.evaluate(
      (url) =>
        new Promise<{ statuses: string[]; dones: number; state: number }>((resolve) => {
          const statuses: string[] = []
          let dones = 0
          const source = new EventSource(url)
          source.addEventListener('status', (e) => statuses.push(JSON.parse((e as MessageEvent).data).status))
          source.addEventListener('done', () => dones++)
          // An error with the source CLOSED is the end: the browser will not reconnect.
          source.addEventListener('error', () => {
            if (source.readyState === EventSource.CLOSED) resolve({ statuses, dones, state: source.readyState })
          })
        }),
      eventsUrl(),
    )
    expect(seen).toEqual({ statuses: ['queued', 'allocating', 'running', 'completed'], dones: 1, state: 2 })
    await waitFor(
      async () => answers.length,
      (n) => n >= 2,
    )
    expect(answers).toEqual([
      { lastEventId: null, status: 200 },
      { lastEventId: lastId, status: 200 },
    ])
  } finally {
    await close()
  }
}, 60_000)

test('the resumed stream of a session at rest with nothing after its cursor is where it ended, in JSON', async () => {
  const res = await fetch(eventsUrl(), { headers: { authorization: `Bearer ${t.admin.token}`, 'last-event-id': lastId } })
  expect(res.status).toBe(200)
  expect(res.headers.get('content-type')).toContain('application/json')
  expect(await res.json()).toMatchObject({ status: 'completed', output: expect.any(String) })
})

test('a resumed stream with events after its cursor, or a session not at rest, still streams', async () => {
  const res = await fetch(`${eventsUrl()}?cursor=1`, { headers: { authorization: `Bearer ${t.admin.token}` } })
  expect(res.status).toBe(200)
  expect(await res.text()).toContain('event: done')
  const open = (
    await json(
      await t.app.handle(
        req('POST', '/o/acme/p/_/sessions', {
          token: t.admin.token,
          body: { agent: 'harness_2', prompt: script([{ sleep: 2000 }, { answer: 'later' }]) },
        }),
      ),
    )
  ).execution_id
  const after = String(t.store.allEvents(open).at(-1)!.seq)
  const live = await fetch(`${base}/o/acme/p/_/sessions/${open}/events`, {
    headers: { authorization: `Bearer ${t.admin.token}`, 'last-event-id': after },
  })
  expect(live.status).toBe(200)
  expect(await live.text()).toContain('event: done')
}, 60_000)
