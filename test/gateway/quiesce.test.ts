import { afterAll, expect, test } from 'bun:test'
import { startGateway } from '../../src/gateway/gateway'

/**
 * A graceful stop readies a turn for its freeze through the gateway: the reply under way is let
 * finish to its last byte, and the turn's new requests are answered 503 with Retry-After, in the
 * CLI's own protocol, so that it asks again after the restart.
 */
const gateway = startGateway({
  resolve: (token) =>
    token === 'key-a' ? { sessionId: 'a', workspace: '/w' } : token === 'key-b' ? { sessionId: 'b', workspace: '/w' } : null,
})
afterAll(() => gateway.stop())

const ask = (key: string, steps: unknown[]) =>
  fetch(`${gateway.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'x-api-key': key },
    body: JSON.stringify({
      model: 'scripted',
      max_tokens: 100,
      stream: true,
      messages: [{ role: 'user', content: `go\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\`` }],
    }),
  })

test("quiesce waits for the streamed reply under way, refuses the session's new requests with a retryable 503, and leaves other sessions alone", async () => {
  const slow = await ask('key-a', [{ sleep: 800 }, { answer: 'late' }])
  expect(slow.status).toBe(200) // headers at once; the model holds the body
  let quietAt = 0
  const quiet = gateway.quiesce('a', Date.now() + 10_000).then((waited) => {
    quietAt = performance.now()
    return waited
  })
  const refused = await ask('key-a', [{ answer: 'now' }])
  expect(refused.status).toBe(503)
  expect(refused.headers.get('retry-after')).toBe('2')
  expect(await refused.json()).toMatchObject({ type: 'error', error: { type: 'overloaded_error' } })
  // Another session's turn is not being stopped.
  expect((await ask('key-b', [{ answer: 'fine' }])).status).toBe(200)
  const body = await slow.text()
  const bodyAt = performance.now()
  expect(body).toContain('late')
  expect(body).toContain('message_stop')
  const waited = await quiet
  expect(waited).toBeGreaterThan(0)
  expect(quietAt).toBeGreaterThanOrEqual(bodyAt - 50)
})

test('quiesce answers at once for a session with nothing under way, and null at its deadline for one whose reply does not end', async () => {
  expect(await gateway.quiesce('nobody', Date.now() + 5_000)).toBe(0)
  const stuck = await ask('key-b', [{ sleep: 5_000 }, { answer: 'too late' }])
  expect(await gateway.quiesce('b', Date.now() + 300)).toBeNull()
  await stuck.body?.cancel()
})
