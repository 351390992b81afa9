/**
 * Secret masking, where a session's text enters storage. A Project's secrets reach its sandbox as
 * environment variables, so anything the agent, its setup script or its tools print may hold one.
 * As CI systems mask job logs, every occurrence of a value of MIN_MASKED_CHARS or more reads `***`
 * in what agentd stores or streams about the session (events, raw transcript lines, logs, result,
 * the row's texts, and so the webhook body). Masking at the store, not at each read path, means no
 * read path can miss it. Shorter values are left alone: masking `abc` would rewrite ordinary words.
 */

export const MASK = '***'
export const MIN_MASKED_CHARS = 4
/** How long a session's values stay after its record is let go (the killed CLI's last output drains well within it). */
const FORGET_AFTER_MS = 60_000

/**
 * Replaces each secret value with `***`: in text, the value itself, each line of a multi-line one
 * (a key printed line by line, or with a prefix on each line), and its JSON-escaped form; in a JSON
 * value, only its strings (keys included), so a value such as `true` or `5432` never rewrites the
 * JSON's own structure.
 */
export class Masker {
  private readonly pattern: RegExp | null

  constructor(readonly values: ReadonlySet<string>) {
    const forms = new Set<string>()
    for (const value of values) {
      if (value.length < MIN_MASKED_CHARS) continue
      const parts = [value, ...value.split(/\r?\n/).filter((line) => line.trim().length >= MIN_MASKED_CHARS)]
      // In JSON text a quote, a backslash or a control character of the value is escaped.
      for (const part of parts) forms.add(part).add(JSON.stringify(part).slice(1, -1))
    }
    // Longest first, so a value that contains another is masked whole.
    const sorted = [...forms].sort((a, b) => b.length - a.length)
    this.pattern = sorted.length > 0 ? new RegExp(sorted.map(escapeRegExp).join('|'), 'g') : null
  }

  mask(text: string): string {
    if (!this.pattern) return text
    return text.replace(this.pattern, MASK)
  }

  /** A JSON-shaped value with every string in it (values and keys) masked; the same value when nothing was. */
  maskJson<T>(value: T): T {
    if (!this.pattern) return value
    return this.walk(value) as T
  }

  /**
   * A line of raw output: when it is JSON (a CLI's stream), its strings are masked and it is
   * written again, so it stays JSON; any other text is masked as text.
   */
  maskLine(line: string): string {
    if (!this.pattern) return line
    const masked = this.mask(line)
    if (masked === line) return line
    try {
      return JSON.stringify(this.walk(JSON.parse(line)))
    } catch {
      return masked
    }
  }

  private walk(value: unknown): unknown {
    if (typeof value === 'string') return this.mask(value)
    if (Array.isArray(value)) {
      let changed = false
      const out = value.map((item) => {
        const next = this.walk(item)
        if (next !== item) changed = true
        return next
      })
      return changed ? out : value
    }
    if (value !== null && typeof value === 'object') {
      let changed = false
      const out: Record<string, unknown> = {}
      for (const [key, item] of Object.entries(value)) {
        const k = this.mask(key)
        const next = this.walk(item)
        if (next !== item || k !== key) changed = true
        out[k] = next
      }
      return changed ? out : value
    }
    return value
  }
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&')
}

/**
 * The secret values each live session's sandbox was given: every value handed to its setup or a
 * turn stays masked for the session's life, even after the Project's secret changes (the old value
 * may still be printed by something that read it). In memory only: after a restart the runtime
 * adds the Project's current values again before the session's next output.
 */
export class SecretMasks {
  private readonly given = new Map<string, Set<string>>()
  private readonly maskers = new Map<string, Masker>()

  /** Adds values given to session `sessionId`'s sandbox. */
  add(sessionId: string, values: Iterable<string>): void {
    let set = this.given.get(sessionId)
    const before = set?.size ?? 0
    for (const value of values) {
      if (value.length < MIN_MASKED_CHARS) continue
      if (!set) this.given.set(sessionId, (set = new Set()))
      set.add(value)
    }
    if (set && set.size !== before) this.maskers.set(sessionId, new Masker(set))
  }

  /** Session `to` (a fork) was given all `from` was: its sandbox is a copy of `from`'s. */
  inherit(from: string, to: string): void {
    const values = this.given.get(from)
    if (values) this.add(to, values)
  }

  /** The session's masker, or null when it was given no secret worth masking. */
  of(sessionId: string): Masker | null {
    return this.maskers.get(sessionId) ?? null
  }

  forget(sessionId: string): void {
    this.given.delete(sessionId)
    this.maskers.delete(sessionId)
  }

  /**
   * Forgets the session's values once what its sandbox still had to say is in: a cancel commits
   * before the turn's killed CLI has been read to its end, and that output is masked too.
   */
  forgetLater(sessionId: string, ms = FORGET_AFTER_MS): void {
    setTimeout(() => this.forget(sessionId), ms).unref()
  }
}
