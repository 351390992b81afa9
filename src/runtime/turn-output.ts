import type { SessionStore } from '../sessions/store'
import type { StoredPrefix } from './handover'
import type { TurnCallbacks } from './turn-runner'

/**
 * Where a turn's output goes: its events and raw lines to the session's store, its stderr to the
 * session's log (`log`), the last thing the assistant said to `summary`. What `stored` says is
 * stored already (a turn taken over after a restart) is dropped.
 */
export function turnOutput(store: SessionStore, log: (text: string) => void, id: string, turn: number, summary: { last: string | null }, stored: StoredPrefix): TurnCallbacks {
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
        events.map((data, i) => ({ turn, kind: 'harness' as const, type: data.type, data: data as Record<string, unknown>, json: json[skipped + i] })),
        raw.map((line) => ({ turn, line })),
      )
    },
    onStderr: (text) => {
      const fresh = stored.newStderr(text)
      if (fresh) log(fresh)
    },
  }
}
