import type { SessionEvent } from '../domain/session-event'
import type { HarnessAdapter, TurnOutcome, TurnSpec } from '../harness/harness'
import type { SandboxDriver, SandboxHandle, SandboxProcess } from '../../sandbox'

export interface TurnCallbacks {
  /** A batch of raw stdout lines and the normalized events they yielded, in stream order. */
  onOutput(events: SessionEvent[], rawLines: string[]): void
  /** A chunk of the CLI's stderr. */
  onStderr(text: string): void
}

export interface RunningTurn {
  readonly process: SandboxProcess
  readonly outcome: Promise<TurnOutcome>
}

/** Splits a byte stream into lines, calling `onLine` for each complete one and the tail at the end. */
async function forEachLine(stream: ReadableStream<Uint8Array>, onLines: (lines: string[]) => void): Promise<void> {
  const decoder = new TextDecoder()
  let buffer = ''
  for await (const chunk of stream) {
    buffer += decoder.decode(chunk, { stream: true })
    const cut = buffer.lastIndexOf('\n')
    if (cut < 0) continue
    onLines(buffer.slice(0, cut).split('\n'))
    buffer = buffer.slice(cut + 1)
  }
  buffer += decoder.decode()
  if (buffer) onLines([buffer])
}

/** Writes the CLI's config files into its home, then starts the CLI in the sandbox. */
export async function startTurn(
  driver: SandboxDriver,
  handle: SandboxHandle,
  adapter: HarnessAdapter,
  spec: TurnSpec,
  callbacks: TurnCallbacks,
): Promise<RunningTurn> {
  const command = adapter.buildTurn(spec)
  for (const [path, content] of Object.entries(command.files ?? {})) {
    await Bun.write(`${handle.hostHome}/${path}`, content)
  }
  const proc = driver.exec(handle, command.argv, { env: command.env })
  const parser = adapter.createParser(spec)
  const stdout = forEachLine(proc.stdout, (lines) => {
    const raw = lines.filter((line) => line.trim() !== '')
    const events = raw.flatMap((line) => parser.push(line))
    if (raw.length > 0) callbacks.onOutput(events, raw)
  })
  const stderr = (async () => {
    const decoder = new TextDecoder()
    for await (const chunk of proc.stderr) callbacks.onStderr(decoder.decode(chunk, { stream: true }))
  })()
  const outcome = (async () => {
    const exitCode = await proc.exited
    await Promise.allSettled([stdout, stderr])
    return parser.finish(exitCode)
  })()
  return { process: proc, outcome }
}
