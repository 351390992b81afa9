import { expect, test } from 'bun:test'
import { StoredPrefix } from '../../src/runtime/handover'
import { turnOutput } from '../../src/runtime/turn-output'
import type { SessionStore } from '../../src/session-record/store'
import { Masker } from '../../src/session-record/masks'

/**
 * The CLI's stderr reaches the session's log in whole lines, so a secret the pipe split between
 * two reads is masked as one (the log masks each piece it is given); a line without end is held
 * back at most 64 KiB, and what is held goes out when the stream ends.
 */
test('stderr is logged line by line: a secret split between two reads is masked whole; the tail goes at the end', () => {
  const masker = new Masker(new Set(['hunter2secret']))
  const logged: string[] = []
  const out = turnOutput({} as SessionStore, (text) => logged.push(masker.mask(text)), 's', 1, { last: null }, new StoredPrefix(null))
  out.onStderr('token=hunter2se')
  out.onStderr('cret\nnext line wit')
  out.onStderr('hout end')
  expect(logged).toEqual(['token=***\n'])
  out.onStderrEnd!()
  expect(logged).toEqual(['token=***\n', 'next line without end'])
  // A line without end that never stops is logged in pieces of 64 KiB, never held without bound.
  out.onStderr('x'.repeat(70 * 1024))
  expect(logged.at(-1)!.length).toBe(70 * 1024)
})
