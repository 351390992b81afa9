/** What a server log line is about, as fields of its JSON line (main.ts writes them with pino). */
export interface LogFields {
  session: string
  turn?: number
  /** A webhook attempt's line: its delivery (the webhook-id), attempt number, answer and time. */
  delivery?: string
  attempt?: number
  status?: number | null
  duration_ms?: number
  outcome?: 'delivered' | 'retrying' | 'failed'
  error?: string
}
