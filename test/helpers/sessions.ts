import { statusIn } from '../../src/domain/status'
import { poll } from './poll'

/** How a test reads one session: its view as the API answers it (GET …/sessions/{id}). */
export type ReadSession = () => Promise<any>

/**
 * The one meaning of "settled" in tests: the session has counted at least `turns` turns and is no
 * longer in progress (queued, allocating or running; STATUS_GROUPS.inProgress). Returns its view.
 * `turns` 0 (the default) also takes a run that ended before any turn, a sandbox that never
 * started. `explain` adds what the session got to when it does not settle in time.
 */
export async function settled(
  read: ReadSession,
  { turns = 0, timeoutMs = 60_000, explain }: { turns?: number; timeoutMs?: number; explain?: () => Promise<string> } = {},
): Promise<any> {
  let view: any
  try {
    return await poll(
      `turn ${turns} to end`,
      async () => {
        view = await read()
        return (view.turns_count ?? 0) >= turns && !statusIn('inProgress', view.status) ? view : null
      },
      { timeoutMs, everyMs: 50, last: () => JSON.stringify(view)?.slice(0, 400) ?? '' },
    )
  } catch (err) {
    throw explain ? new Error(`${(err as Error).message}\n${await explain()}`) : err
  }
}
