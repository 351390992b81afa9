/** What a server log line is about, as fields of its JSON line (main.ts writes them with pino). */
export interface LogFields {
  session: string
  turn?: number
}
