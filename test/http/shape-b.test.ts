import { afterAll, beforeAll, describe, expect, test } from 'bun:test'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { makeTestApp, type TestApp } from '../helpers/app'
import { json, req, script, waitFor } from '../helpers/http'

/**
 * Shape B create (spec 4.1, contract section 8) through the HTTP API of a real agentd on bwrap:
 * uploads, content blocks, attachments in the sandbox, and every bad input's answer.
 */

let t: TestApp
let keySecret: string
let images: Server
let imageBase: string
/** A 1x1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64')

beforeAll(async () => {
  // AGENTD_WEBHOOK_ALLOW_PRIVATE lets the image fetch reach the local image server (tests only).
  t = await makeTestApp({ AGENTD_SANDBOX: 'bwrap', AGENTD_WEBHOOK_ALLOW_PRIVATE: '1' })
  keySecret = (await json(await t.app.handle(req('POST', '/o/acme/api-keys', { token: t.admin.token, body: { name: 'ci' } })))).secret
  images = createServer((request, response) => {
    if (request.url === '/pixel.png') response.writeHead(200, { 'content-type': 'image/png' }).end(PNG)
    else if (request.url === '/moved.png') response.writeHead(302, { location: '/pixel.png' }).end()
    else if (request.url === '/page.png') response.writeHead(200, { 'content-type': 'text/html' }).end('<html></html>')
    else if (request.url === '/huge.png')
      response.writeHead(200, { 'content-type': 'image/png', 'content-length': String(40 * 1024 * 1024) }).end()
    else if (request.url === '/20mib.png') response.writeHead(200, { 'content-type': 'image/png' }).end(Buffer.alloc(20 * 1024 * 1024))
    else response.writeHead(404).end()
  })
  await new Promise<void>((resolve) => images.listen(0, '127.0.0.1', resolve))
  imageBase = `http://127.0.0.1:${(images.address() as AddressInfo).port}`
})
afterAll(async () => {
  images?.close()
  await t?.[Symbol.asyncDispose]()
})

const SESSIONS = '/o/acme/p/_/sessions'

async function create(body: unknown, token = t.admin.token) {
  const res = await t.app.handle(req('POST', SESSIONS, { token, body }))
  return { status: res.status, body: await json(res) }
}

async function upload(name: string, content: string | Uint8Array, type = 'text/plain', token = t.admin.token, field = 'file') {
  const form = new FormData()
  form.append(field, new File([content], name, { type }))
  const res = await t.app.handle(
    new Request('http://localhost/o/acme/files', { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: form }),
  )
  return { status: res.status, body: await json(res) }
}

const text = (s: string) => ({ type: 'text', text: s })
const doc = (name: string, content: string, media_type = 'text/plain') => ({
  type: 'document',
  name,
  source: { type: 'base64', media_type, data: Buffer.from(content).toString('base64') },
})
const fileBlock = (file_id: string) => ({ type: 'file', source: { type: 'file', file_id } })
const image = (url: string) => ({ type: 'image', source: { type: 'url', url } })

function expectError(answer: { status: number; body: any }, status: number, code: string, codeField = 'code') {
  expect({ status: answer.status, code: answer.body[codeField] }).toEqual({ status, code })
  expect(typeof answer.body.error).toBe('string')
}

describe('POST /o/{org}/files', () => {
  test('a multipart upload answers 201 with its id, name, type, size and when it expires unused (7 days)', async () => {
    const before = Date.now()
    const answer = await upload('report.csv', 'a,b\n1,2\n', 'text/csv')
    expect(answer.status).toBe(201)
    expect(answer.body).toEqual({
      id: expect.stringMatching(/^file_[0-9a-f]{32}$/),
      name: 'report.csv',
      mime: 'text/csv',
      size: 8,
      expired_at: expect.any(String),
    })
    const expires = Date.parse(answer.body.expired_at)
    expect(expires).toBeGreaterThanOrEqual(before + 7 * 24 * 3600 * 1000 - 1000)
    expect(expires).toBeLessThanOrEqual(Date.now() + 7 * 24 * 3600 * 1000)
  })

  test('over 32 MiB is 413 PAYLOAD_TOO_LARGE; no file part, or not multipart, is 400; an API key is 401', async () => {
    expectError(await upload('big.bin', new Uint8Array(32 * 1024 * 1024 + 1), 'application/octet-stream'), 413, 'PAYLOAD_TOO_LARGE')
    expectError(await upload('a.txt', 'x', 'text/plain', t.admin.token, 'other'), 400, 'VALIDATION_ERROR')
    const asJson = await t.app.handle(req('POST', '/o/acme/files', { token: t.admin.token, body: { file: 'x' } }))
    expectError({ status: asJson.status, body: await json(asJson) }, 400, 'VALIDATION_ERROR')
    const broken = await t.app.handle(
      new Request('http://localhost/o/acme/files', {
        method: 'POST',
        headers: { authorization: `Bearer ${t.admin.token}`, 'content-type': 'multipart/form-data; boundary=xyz' },
        body: 'not multipart',
      }),
    )
    expectError({ status: broken.status, body: await json(broken) }, 400, 'VALIDATION_ERROR')
    expect((await upload('a.txt', 'x', 'text/plain', keySecret)).status).toBe(401)
  })
})

describe('shape B on POST …/sessions', () => {
  test('a harness_1 run reads a document block and a file block from the attachments folder; the session lists both, and an image, in block order', async () => {
    const uploaded = await upload('data.csv', 'id,value\n7,seven\n', 'text/csv')
    const reader = script([
      {
        bash: 'cat /workspace/.agentd/attachments/notes.txt /workspace/.agentd/attachments/data.csv; wc -c < /workspace/.agentd/attachments/pixel.png',
      },
      { answer: 'read them' },
    ])
    const answer = await create({
      harness: 'harness_1',
      input: [
        text('Read the attached files.'),
        doc('notes.txt', 'remember the milk\n'),
        fileBlock(uploaded.body.id),
        image(`${imageBase}/pixel.png`),
        text(reader),
      ],
    })
    expect(answer.status).toBe(202)
    expect(answer.body.agent).toBe('harness_1')
    expect(answer.body.prompt).toBe(`Read the attached files.\n\n${reader}`)
    expect(answer.body.attachments).toEqual([
      { id: expect.stringMatching(/^file_/), name: 'notes.txt', mime: 'text/plain', size: 18, expired_at: null },
      { id: uploaded.body.id, name: 'data.csv', mime: 'text/csv', size: 17, expired_at: null },
      { id: expect.stringMatching(/^file_/), name: 'pixel.png', mime: 'image/png', size: PNG.byteLength, expired_at: null },
    ])
    const id = answer.body.execution_id
    const done = await waitFor(
      async () => json(await t.app.handle(req('GET', `${SESSIONS}/${id}`, { token: t.admin.token }))),
      (s) => !['queued', 'allocating', 'running'].includes(s.status),
      60_000,
    )
    expect(done.status).toBe('completed')
    expect(done.attachments).toEqual(answer.body.attachments)
    const outputs = t.store
      .allEvents(id)
      .filter((e) => e.type === 'tool_result')
      .map((e) => String(e.data.output ?? ''))
    expect(outputs.join('\n')).toContain('remember the milk\nid,value\n7,seven\n')
    expect(outputs.join('\n')).toContain(String(PNG.byteLength))
  }, 60_000)

  test('a string input is the prompt; an API key may send text blocks, harness, model and effort', async () => {
    const plain = await create({ input: 'just words', harness: 'harness_2' }, keySecret)
    expect(plain.status).toBe(202)
    expect(plain.body).toMatchObject({ prompt: 'just words', agent: 'harness_2', attachments: [] })
    const blocks = await create({ input: [text('one'), text('two')], harness: 'harness_1', effort: 'high' }, keySecret)
    expect(blocks.status).toBe(202)
    expect(blocks.body.prompt).toBe('one\n\ntwo')
  })

  test('an API key may not send files, skills, connections, resources, a saved agent or an account (422 API_KEY_FIELD_UNSUPPORTED)', async () => {
    const upload1 = await upload('k.txt', 'k')
    for (const body of [
      { input: [text('t'), doc('a.txt', 'a')] },
      { input: [text('t'), fileBlock(upload1.body.id)] },
      { input: [text('t'), image(`${imageBase}/pixel.png`)] },
      { input: 't', skills: ['https://example.com/SKILL.md'] },
      { input: 't', connections: ['github'] },
      { input: 't', resources: [{ url: 'https://github.com/acme/web' }] },
      { input: 't', agent_id: 'agent_1' },
      { input: 't', account_id: 'acct_1' },
    ]) {
      expectError(await create({ harness: 'harness_1', ...body }, keySecret), 422, 'API_KEY_FIELD_UNSUPPORTED')
    }
  })

  test('every bad input is a clear 4xx and creates nothing', async () => {
    const mine = await upload('mine.txt', 'mine')
    const before = (await json(await t.app.handle(req('GET', SESSIONS, { token: t.admin.token })))).executions.length
    const cases: [unknown, number, string][] = [
      [{ input: 'a', prompt: 'b' }, 400, 'VALIDATION_ERROR'],
      [{ harness: 'harness_1' }, 400, 'VALIDATION_ERROR'],
      [{ prompt: 'p', harness: 'harness_1' }, 400, 'VALIDATION_ERROR'],
      [{ input: 'p', harness: 'harness_1', agent: 'harness_2' }, 400, 'VALIDATION_ERROR'],
      [{ input: [doc('a.txt', 'a')], harness: 'harness_1' }, 400, 'VALIDATION_ERROR'],
      [{ input: [text('  ')], harness: 'harness_1' }, 400, 'VALIDATION_ERROR'],
      [{ input: [], harness: 'harness_1' }, 400, 'VALIDATION_ERROR'],
      [{ input: [{ type: 'video', url: 'x' }], harness: 'harness_1' }, 400, 'VALIDATION_ERROR'],
      [{ input: [text('t'), fileBlock('file_0000')], harness: 'harness_1' }, 400, 'VALIDATION_ERROR'],
      [
        {
          input: [text('t'), { type: 'document', name: 'a', source: { type: 'base64', media_type: 'text/plain', data: 'not base64!' } }],
          harness: 'harness_1',
        },
        400,
        'VALIDATION_ERROR',
      ],
      [{ input: [text('x'.repeat(256 * 1024 + 1))], harness: 'harness_1' }, 400, 'CONTENT_TOO_LARGE'],
      [{ input: [text('t'), image(`${imageBase}/moved.png`)], harness: 'harness_1' }, 422, 'ATTACHMENT_FETCH_FAILED'],
      [{ input: [text('t'), image(`${imageBase}/page.png`)], harness: 'harness_1' }, 422, 'ATTACHMENT_FETCH_FAILED'],
      [{ input: [text('t'), image(`${imageBase}/missing.png`)], harness: 'harness_1' }, 422, 'ATTACHMENT_FETCH_FAILED'],
      [{ input: [text('t'), image('ftp://example.com/a.png')], harness: 'harness_1' }, 422, 'ATTACHMENT_FETCH_FAILED'],
      [{ input: 't', harness: 'harness_1', connections: ['github'] }, 422, 'CONNECTION_NOT_READY'],
      [{ input: 't', harness: 'harness_9' }, 400, 'VALIDATION_ERROR'],
    ]
    for (const [body, status, code] of cases) {
      const answer = await create(body)
      expect({ body, status: answer.status, code: answer.body.code }).toEqual({ body, status, code })
    }
    // Another user's upload is not theirs to name.
    const other = await t.app.handle(
      req('POST', SESSIONS, { token: t.member.token, body: { harness: 'harness_1', input: [text('t'), fileBlock(mine.body.id)] } }),
    )
    expectError({ status: other.status, body: await json(other) }, 400, 'VALIDATION_ERROR')
    const after = (await json(await t.app.handle(req('GET', SESSIONS, { token: t.admin.token })))).executions.length
    expect(after).toBe(before)
  })

  test('resources: each URL form of spec 4.1 is read; others are 422 RESOURCE_UNSUPPORTED; a repository or issue nothing here can reach is 422 RESOURCE_NOT_ACCESSIBLE', async () => {
    const send = (resources: unknown, project = '_') =>
      t.app
        .handle(
          req('POST', `/o/acme/p/${project}/sessions`, { token: t.admin.token, body: { harness: 'harness_2', input: 't', resources } }),
        )
        .then(async (r) => ({ status: r.status, body: await json(r) }))
    for (const url of [
      'https://gitlab.com/acme/web',
      'http://github.com/acme/web',
      'https://github.com/acme',
      'https://github.com/acme/web/issues/3',
      'https://github.com/acme/web/pull/x',
      'https://linear.app/acme/project/X-1',
      'https://github.com/acme/web/tree/%E0',
      'not a url',
    ]) {
      const answer = await send([{ url }])
      expect({ url, status: answer.status, code: answer.body.code }).toEqual({ url, status: 422, code: 'RESOURCE_UNSUPPORTED' })
    }
    for (const url of [
      'https://github.com/acme/web',
      'https://github.com/acme/web.git',
      'https://github.com/acme/web/tree/feature/x',
      'https://github.com/acme/web/pull/12',
      'https://linear.app/acme/issue/ENG-42',
    ]) {
      const answer = await send([{ url }])
      expect({ url, status: answer.status, code: answer.body.code }).toEqual({ url, status: 422, code: 'RESOURCE_NOT_ACCESSIBLE' })
    }
    expectError(await send([{ url: 'https://github.com/acme/web' }, { url: 'https://github.com/acme/api' }]), 400, 'VALIDATION_ERROR')
    // A Project run may name only its own repository.
    t.identity.createProject('acme', 'site', 'acme/site')
    const other = await send([{ url: 'https://github.com/acme/api' }], 'site')
    expectError(other, 422, 'RESOURCE_NOT_ACCESSIBLE')
    expect(other.body.error).toContain('its own repository')
  })

  test('the files of one create are at most 32 MiB together (an image over it, or a file named twice, is 413) and nothing is made', async () => {
    const before = (await json(await t.app.handle(req('GET', SESSIONS, { token: t.admin.token })))).executions.length
    const twenty = await upload('twenty.bin', new Uint8Array(20 * 1024 * 1024), 'application/octet-stream')
    expect(twenty.status).toBe(201)
    for (const input of [
      [text('t'), image(`${imageBase}/huge.png`)],
      [text('t'), fileBlock(twenty.body.id), fileBlock(twenty.body.id)],
      [text('t'), fileBlock(twenty.body.id), image(`${imageBase}/20mib.png`)],
    ]) {
      expectError(await create({ harness: 'harness_2', input }), 413, 'PAYLOAD_TOO_LARGE')
    }
    expect(
      (await create({ harness: 'harness_2', input: [text(script([{ answer: 'ok' }])), image(`${imageBase}/20mib.png`)] })).status,
    ).toBe(202)
    expect((await json(await t.app.handle(req('GET', SESSIONS, { token: t.admin.token })))).executions.length).toBe(before + 1)
  })

  test('a 9 MiB document fits in a create body; file names become safe and unique in the attachments folder', async () => {
    const big = await create({
      harness: 'harness_2',
      input: [
        text('t'),
        { type: 'document', name: 'big', source: { type: 'base64', media_type: 'text/plain', data: 'A'.repeat(12 * 1024 * 1024) } },
      ],
    })
    // 12 MiB of base64 is 9 MiB: under the attachment limit; the body limit (16 MiB) took it.
    expect(big.status).toBe(202)
    const named = await create({
      harness: 'harness_2',
      input: [
        text(script([{ answer: 'ok' }])),
        doc('../../etc/passwd', 'p'),
        doc('a.txt', '1'),
        doc('a.txt', '2'),
        doc('.bashrc', 'b'),
        doc('ünïcode name?.md', 'u'),
      ],
    })
    expect(named.status).toBe(202)
    expect(named.body.attachments.map((a: { name: string }) => a.name)).toEqual([
      'passwd',
      'a.txt',
      'a-2.txt',
      'bashrc',
      '_n_code_name_.md',
    ])
  })

  test('Idempotency-Key on shape B: the same body answers with the first session, another body is 409', async () => {
    const body = { harness: 'harness_2', input: [text(script([{ answer: 'once' }])), doc('n.txt', 'n')] }
    const send = async (b: unknown) => {
      const res = await t.app.handle(req('POST', SESSIONS, { token: t.admin.token, body: b, headers: { 'idempotency-key': 'shape-b-1' } }))
      return { status: res.status, body: await json(res) }
    }
    const first = await send(body)
    expect(first.status).toBe(202)
    const again = await send(JSON.parse(JSON.stringify(body)))
    expect(again.status).toBe(202)
    expect(again.body.execution_id).toBe(first.body.execution_id)
    expect(again.body.attachments).toEqual(first.body.attachments)
    expectError(await send({ ...body, input: [text('another task')] }), 409, 'IDEMPOTENCY_CONFLICT')
  })

  test('Idempotency-Key on shape B: 20 concurrent identical creates with an image to fetch make one session with one set of attachments', async () => {
    const body = { harness: 'harness_2', input: [text(script([{ answer: 'once' }])), image(`${imageBase}/pixel.png`), doc('n.txt', 'n')] }
    const answers = await Promise.all(
      Array.from({ length: 20 }, async () => {
        const res = await t.app.handle(
          req('POST', SESSIONS, { token: t.admin.token, body, headers: { 'idempotency-key': 'shape-b-burst' } }),
        )
        return { status: res.status, body: await json(res) }
      }),
    )
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(202))
    expect(new Set(answers.map((a) => a.body.execution_id)).size).toBe(1)
    expect(new Set(answers.map((a) => JSON.stringify(a.body.attachments))).size).toBe(1)
    expect(answers[0]!.body.attachments.map((a: { name: string }) => a.name)).toEqual(['pixel.png', 'n.txt'])
  })
})
