/**
 * Compiling a schema from outside on the server's thread (contract section 11): a create's
 * `output_schema` (checked, and compiled, at create) and a sandbox's `text.format` schema (compiled
 * by the gateway through ValidatorCache). Within the spec's 64 KiB and 10 levels, ajv's code
 * optimizer and RE2's counted repetition each made one schema cost seconds of the thread; what may
 * cost that is refused before compiling (400 OUTPUT_SCHEMA_INVALID at create), and what is
 * accepted compiles within the bound every attack test holds the thread to.
 */
import { afterAll, beforeAll, expect, test } from 'bun:test'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req } from '../helpers/http'
import { ValidatorCache } from '../../src/domain/json-schema'
import { BUSY_BOUND_MS, watchLoop } from './helpers'

let t: TestApp
beforeAll(async () => {
  t = await makeTestApp()
})
afterAll(() => t?.[Symbol.asyncDispose]())

const idle = 'hello\n```agentd-script\n[{"sleep": 60000}]\n```'
const object = (properties: Record<string, unknown>) => ({
  type: 'object',
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
})
const strings = (n: number) => object(Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'string' }])))
const patternKeys = (n: number, pattern: (i: number) => string) => ({
  type: 'object',
  patternProperties: Object.fromEntries(Array.from({ length: n }, (_, i) => [pattern(i), { type: 'string' }])),
  additionalProperties: false,
})

/** Each within the spec's rules (64 KiB, 10 levels, every property required); each took a second or more of the thread to compile. */
const COSTLY: [string, Record<string, unknown>][] = [
  ['1,900 string properties (62 KiB)', strings(1900)],
  ['1,500 patternProperties keys (1.7 s and more)', patternKeys(1500, (i) => `^x${i}.{0,1000}$`)],
  [
    'one pattern whose counted repetition RE2 expands to 500,000 steps',
    object({ s: { type: 'string', pattern: '.{0,1000}'.repeat(500) } }),
  ],
  ['an enum of 8,000 values', object({ n: { enum: Array.from({ length: 8000 }, (_, i) => i) } })],
  ['anyOf 1,500 constants', object({ s: { anyOf: Array.from({ length: 1500 }, (_, i) => ({ type: 'string', const: `v${i}` })) } })],
]

async function create(schema: Record<string, unknown>) {
  const loop = watchLoop()
  const res = await t.app.handle(
    req('POST', '/o/acme/p/_/sessions', { token: t.admin.token, body: { agent: 'harness_1', prompt: idle, output_schema: schema } }),
  )
  const body = await json(res)
  return { status: res.status, body, busyMs: loop.stop().maxBusyMs }
}

for (const [name, schema] of COSTLY) {
  test(`output_schema with ${name}: 400 OUTPUT_SCHEMA_INVALID, the server's thread never held`, async () => {
    expect(JSON.stringify(schema).length).toBeLessThanOrEqual(64 * 1024)
    const answer = await create(schema)
    expect({ status: answer.status, code: answer.body.code }).toEqual({ status: 400, code: 'OUTPUT_SCHEMA_INVALID' })
    expect(answer.body.error).toStartWith('output_schema ')
    expect(answer.busyMs).toBeLessThan(BUSY_BOUND_MS)
  })
}

test('the largest schemas accepted compile within the bound: 998 string properties, or 100 patterns', async () => {
  for (const schema of [strings(998), patternKeys(100, (i) => `^x${i}[a-z]{0,90}$`)]) {
    const answer = await create(schema)
    expect(answer.status).toBe(202)
    expect(answer.busyMs).toBeLessThan(BUSY_BOUND_MS)
    await t.app.handle(
      req('PATCH', `/o/acme/p/_/sessions/${answer.body.execution_id}`, { token: t.admin.token, body: { status: 'cancelled' } }),
    )
  }
})

test("a sandbox's text.format schema is held to the same limits before the gateway compiles it", () => {
  const cache = new ValidatorCache(4)
  // 1,000 levels of `items` in 25 KiB: 4 s to compile before, and then a stack overflow.
  let deep: Record<string, unknown> = { type: 'string' }
  for (let i = 0; i < 1000; i++) deep = { type: 'array', items: deep }
  for (const schema of [...COSTLY.map(([, s]) => s), object({ a: deep })]) {
    const started = performance.now()
    expect(() => cache.get(JSON.stringify(schema))).toThrow(/^the schema (holds more than|has patterns too large|is nested deeper than)/)
    expect(performance.now() - started).toBeLessThan(BUSY_BOUND_MS)
  }
  expect(cache.get(JSON.stringify(strings(3)))({ p0: 'a', p1: 'b', p2: 'c' })).toBe(true)
})
