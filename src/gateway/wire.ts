/**
 * Small pieces every wire protocol of the gateway shares: stalls for scripted `sleep`, SSE
 * framing, credentials, and the shell commands the scripted model sends to CLIs whose only tool
 * is a shell.
 */
import { posix } from 'node:path'

/** The catalog id of the scripted model; every other model goes upstream when a provider is set. */
export const SCRIPTED_MODEL = 'scripted'

/** While a scripted `sleep` stalls a streaming reply, keepalives make the client stay patient. */
const KEEPALIVE_INTERVAL_MS = 5_000

/** Waits `ms` (calling `tick` every few seconds), or rejects as soon as the request is aborted. */
export function stall(ms: number, signal: AbortSignal, tick?: () => void): Promise<void> {
  if (ms <= 0) return Promise.resolve()
  return new Promise((resolve, reject) => {
    const done = setTimeout(finish, ms)
    const ticker = tick ? setInterval(tick, KEEPALIVE_INTERVAL_MS) : undefined
    const abort = () => finish(new Error('request aborted'))
    function finish(err?: Error) {
      clearTimeout(done)
      clearInterval(ticker)
      signal.removeEventListener('abort', abort)
      if (err) reject(err)
      else resolve()
    }
    if (signal.aborted) return abort()
    signal.addEventListener('abort', abort)
  })
}

export interface SseWriter {
  /** Sends one frame; `event` is omitted for protocols whose frames carry only `data:`. */
  send(data: unknown, event?: string): void
  /** A comment line, which SSE clients ignore; used as a keepalive. */
  comment(text: string): void
  /**
   * An empty line: a keepalive for clients that parse no comment lines (the Gemini SDK matches
   * `^\s*data: ` at the start of what it has buffered, so whitespace before a frame is skipped).
   */
  blank(): void
}

/**
 * A streaming SSE response whose body `run` writes. The response is returned at once, so headers
 * flush before any scripted stall; `run` gets a signal that fires when the client goes away.
 */
export function sseResponse(signal: AbortSignal, run: (out: SseWriter, gone: AbortSignal) => Promise<void>, lineEnd = '\n'): Response {
  const encoder = new TextEncoder()
  const gone = new AbortController()
  signal.addEventListener('abort', () => gone.abort())
  const stream = new ReadableStream<Uint8Array>({
    // Not awaited in start(): the response must flow while the model stalls.
    start: (controller) =>
      void (async () => {
        const writer: SseWriter = {
          send: (data, event) => {
            const head = event ? `event: ${event}${lineEnd}` : ''
            controller.enqueue(encoder.encode(`${head}data: ${JSON.stringify(data)}${lineEnd}${lineEnd}`))
          },
          comment: (text) => controller.enqueue(encoder.encode(`: ${text}${lineEnd}${lineEnd}`)),
          blank: () => controller.enqueue(encoder.encode(lineEnd)),
        }
        try {
          await run(writer, gone.signal)
          controller.close()
        } catch {
          // The client went away mid-stall (turn stopped); there is nobody left to answer.
        }
      })(),
    cancel: () => gone.abort(),
  })
  return new Response(stream, { headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' } })
}

export function bearer(header: string | null): string | null {
  const match = header?.match(/^Bearer\s+(.+)$/i)
  return match?.[1] ?? null
}

export function randomId(): string {
  return crypto.randomUUID().replaceAll('-', '')
}

/** Quotes a string for a POSIX shell. */
export function shellQuote(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`
}

/** A shell command writing `content` to `path` byte for byte, for CLIs without a file-write tool. */
export function writeFileCommand(path: string, content: string): string {
  return `mkdir -p ${shellQuote(posix.dirname(path))} && printf '%s' ${shellQuote(content)} > ${shellQuote(path)}`
}

/** A one-line description of a command, as CLIs ask the model to give with a shell call. */
export function describeCommand(command: string): string {
  const line = command.split('\n')[0] ?? ''
  return line.length > 60 ? `Run ${line.slice(0, 57)}...` : `Run ${line}`
}

export function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw)
  } catch {
    return undefined
  }
}
