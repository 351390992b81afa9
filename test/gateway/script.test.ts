import { describe, expect, test } from 'bun:test'
import { groupSteps, isInjectedText, nextReply, parseScript, replyUsage, type ConversationEntry, type Step } from '../../src/gateway/script'

const script = (steps: unknown) => `Do the thing\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\`\n`
const user = (text: string): ConversationEntry => ({ role: 'user', text })
const assistant: ConversationEntry = { role: 'assistant' }
const tool: ConversationEntry = { role: 'tool' }

describe('parseScript', () => {
  test('finds the fenced block and keeps step order', () => {
    const parsed = parseScript(script([{ say: 'a' }, { bash: 'ls' }, { answer: 'b' }]))
    expect(parsed).toEqual({ kind: 'valid', steps: [{ say: 'a' }, { bash: 'ls' }, { answer: 'b' }] })
  })

  test('no fence is no script', () => {
    expect(parseScript('just a prompt')).toEqual({ kind: 'none' })
  })

  test.each([
    ['[{"say": oops}]', 'not valid JSON'],
    ['{"say": "x"}', 'JSON array'],
    ['[{"dance": "x"}]', 'step 1: unknown step "dance"'],
    ['[{"say": "a", "bash": "b"}]', 'exactly one key'],
    ['[{"say": 1}]', '"say" takes a string'],
    ['[{"sleep": -5}]', '"sleep" takes a number'],
    ['[{"write": {"path": "a"}}]', '"write" takes'],
    ['[{"artifact": {"name": "../x", "content": ""}}]', 'inside the artifacts directory'],
    ['[{"structured": [1]}]', '"structured" takes a JSON object'],
    ['[{"usage": {"input": 1}}]', '"usage" takes'],
    ['[{"answer": "ok"}, {"usage": {"input": 1, "output": 2, "cache_read": -1}}]', 'step 2: "usage.cache_read"'],
  ])('rejects %s', (body, reason) => {
    const parsed = parseScript(`\`\`\`agentd-script\n${body}\n\`\`\``)
    expect(parsed.kind).toBe('invalid')
    expect(parsed.kind === 'invalid' && parsed.reason).toContain(reason)
  })
})

describe('groupSteps', () => {
  test('non-tool steps ride with the next tool or terminal step', () => {
    const steps: Step[] = [
      { think: 't' },
      { say: 's' },
      { sleep: 10 },
      { bash: 'ls' },
      { sleep: 5 },
      { usage: { input: 3, output: 4 } },
      { write: { path: 'a.txt', content: 'A' } },
      { answer: 'done' },
    ]
    const replies = groupSteps(steps)
    expect(replies.map((r) => r.parts.map((p) => p.type))).toEqual([['thinking', 'text', 'bash'], ['write'], ['text']])
    expect(replies.map((r) => r.sleepMs)).toEqual([10, 5, 0])
    expect(replies[1]?.usage).toEqual({ input: 3, output: 4, cacheRead: 0, cacheWrite: 0 })
  })

  test('steps after a terminal step are never reached', () => {
    const replies = groupSteps([{ fail: 'boom' }, { answer: 'never' }])
    expect(replies).toHaveLength(1)
    expect(replies[0]?.failure).toBe('boom')
  })

  test('trailing says end the turn; a trailing think gets the last said text', () => {
    expect(groupSteps([{ bash: 'ls' }, { say: 'bye' }])[1]?.parts).toEqual([{ type: 'text', text: 'bye' }])
    expect(groupSteps([{ say: 'hi' }, { bash: 'ls' }, { think: 'hmm' }])[1]?.parts).toEqual([
      { type: 'thinking', text: 'hmm' },
      { type: 'text', text: 'hi' },
    ])
  })
})

describe('nextReply', () => {
  const steps = [{ say: 'first' }, { bash: 'echo 1' }, { artifact: { name: 'r.md', content: '#' } }, { answer: 'ok' }]

  test('the reply index is the number of assistant replies since the scripted user message', () => {
    const start = [user(script(steps))]
    expect(nextReply(start).parts.map((p) => p.type)).toEqual(['text', 'bash'])
    expect(nextReply([...start, assistant, tool]).parts).toEqual([{ type: 'artifact', name: 'r.md', content: '#', contentType: null }])
    expect(nextReply([...start, assistant, tool, assistant, tool]).parts).toEqual([{ type: 'text', text: 'ok' }])
  })

  test('consecutive assistant entries count as one reply', () => {
    expect(nextReply([user(script(steps)), assistant, assistant, tool]).parts[0]?.type).toBe('artifact')
  })

  test('a script that ran out ends with the last said text, or Done', () => {
    const ran = (s: unknown) => nextReply([user(script(s)), assistant, tool]).parts
    expect(ran([{ say: 'looking' }, { bash: 'ls' }])).toEqual([{ type: 'text', text: 'looking' }])
    expect(ran([{ bash: 'ls' }])).toEqual([{ type: 'text', text: 'Done' }])
  })

  test('a follow-up without a script answers Done with its first line', () => {
    const conversation = [user(script(steps)), assistant, tool, assistant, tool, assistant, user('  check again\nplease  ')]
    expect(nextReply(conversation).parts).toEqual([{ type: 'text', text: 'Done: check again' }])
  })

  test('a follow-up with a script starts that script from its first step', () => {
    const conversation = [user(script([{ answer: 'one' }])), assistant, user(script([{ bash: 'pwd' }, { answer: 'two' }]))]
    expect(nextReply(conversation).parts).toEqual([{ type: 'bash', command: 'pwd' }])
  })

  test('an invalid script fails the turn with a message naming the problem', () => {
    const reply = nextReply([user('```agentd-script\n[{"say": 1}]\n```')])
    expect(reply.failure).toBe('invalid agentd-script: step 1: "say" takes a string')
    expect(reply.parts).toEqual([])
  })

  test('a recall step answers with the first line of every user message it was sent, earlier turns’ included', () => {
    const first = `Make notes\n${script([{ bash: 'touch notes' }, { answer: 'one' }])}`
    const conversation = [user(first), assistant, tool, assistant, user(`Go on\n${script([{ say: 'looking' }, { recall: 'Seen' }])}`)]
    expect(nextReply(conversation).parts).toEqual([
      { type: 'text', text: 'looking' },
      { type: 'text', text: 'Seen: Make notes | Go on' },
    ])
    expect(nextReply(conversation).recall).toBeUndefined()
    expect(nextReply([user(script([{ recall: 1 }]))]).failure).toBe('invalid agentd-script: step 1: "recall" takes a string')
  })

  test('an empty conversation gets a plain Done', () => {
    expect(nextReply([]).parts).toEqual([{ type: 'text', text: 'Done' }])
  })
})

describe('tokens', () => {
  test('default to ceil(chars / 4) of request and reply', () => {
    const reply = nextReply([user(script([{ say: 'abcde' }, { answer: 'xyz' }]))])
    expect(replyUsage(reply, 10)).toEqual({ input: 3, output: 2, cacheRead: 0, cacheWrite: 0 })
  })

  test('a usage step overrides them for its reply', () => {
    const reply = nextReply([user(script([{ usage: { input: 7, output: 3, cache_read: 2, cache_write: 1 } }, { answer: 'x' }]))])
    expect(replyUsage(reply, 1000)).toEqual({ input: 7, output: 3, cacheRead: 2, cacheWrite: 1 })
  })
})

test('isInjectedText spots texts wholly wrapped in one tag', () => {
  expect(isInjectedText('<system-reminder>\nctx\n</system-reminder>')).toBe(true)
  expect(isInjectedText(' <environment_context>x</environment_context> ')).toBe(true)
  expect(isInjectedText('<b>bold</b> and more')).toBe(false)
  expect(isInjectedText('plain prompt')).toBe(false)
})
