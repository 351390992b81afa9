import type { SessionStore } from '../session-record/store'
import type { StoredPrefix } from './handover'
import type { TurnCallbacks } from './turn-runner'

/** The last thing the assistant said in a turn (the run's summary), kept as its output goes by. */
export type TurnSummary = { last: string | null }

/** The most of a stderr line without its end held back before it is logged anyway. */
const STDERR_HOLD_CHARS = 64 * 1024

/**
 * Where a turn's output goes: its events and raw lines to the session's store, its stderr to the
 * session's log (`log`), the last thing the assistant said to `summary`. What `stored` says is
 * stored already (a turn taken over after a restart) is dropped.
 */
export function turnOutput(
  store: SessionStore,
  log: (text: string) => void,
  id: string,
  turn: number,
  summary: { last: string | null },
  stored: StoredPrefix,
): TurnCallbacks {
  let tail = ''
  return {
    onOutput: (normalized, rawLines, json) => {
      for (const event of normalized) {
        if (event.type === 'message' && event.role === 'assistant' && event.content?.trim()) summary.last = event.content
      }
      const events = stored.newEvents(normalized)
      const skipped = normalized.length - events.length
      const raw = stored.newRaw(rawLines)
      if (events.length === 0 && raw.length === 0) return
      store.events.append(
        id,
        events.map((data, i) => ({
          turn,
          kind: 'harness' as const,
          type: data.type,
          data: data as Record<string, unknown>,
          json: json[skipped + i],
        })),
        raw.map((line) => ({ turn, line })),
      )
    },
    // Whole lines go to the log (a secret split between two reads is still masked as one), or
    // STDERR_HOLD_CHARS at most of a line without end; the rest when the stream ends.
    onStderr: (text) => {
      const fresh = stored.newStderr(text)
      if (!fresh) return
      const all = tail + fresh
      const cut = all.lastIndexOf('\n')
      if (cut < 0 && all.length < STDERR_HOLD_CHARS) {
        tail = all
        return
      }
      tail = cut < 0 ? '' : all.slice(cut + 1)
      log(cut < 0 ? all : all.slice(0, cut + 1))
    },
    onStderrEnd: () => {
      if (tail) log(tail)
      tail = ''
    },
  }
}
