/**
 * A push's request (`POST …/git-receive-pack`, git's smart HTTP, protocol v0/v1) read on the host
 * as data, up to its command list: which refs it updates, creates or deletes. The pack after the
 * list is not read here; what was read is given back with the rest of the body, to send on.
 *
 *   update-requests = *shallow ( command-list | push-cert )
 *   command-list    = PKT-LINE(command NUL capability-list) *PKT-LINE(command) flush-pkt
 *   command         = old-id SP new-id SP name
 *
 * (gitprotocol-pack(5), "Reference Update Request and Packfile Transfer").
 */

export interface RefCommand {
  old: string
  new: string
  ref: string
}

export interface PushRequest {
  commands: RefCommand[]
  capabilities: string[]
  /** The body as it came, the bytes read here first (send this on, not the request's body). */
  body: ReadableStream<Uint8Array>
}

/** The command list is small (a push of one branch is one line): a longer one is not a push agentd takes. */
export const COMMANDS_MAX_BYTES = 64 * 1024

const ID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/

/** A deletion's new id: all zeros. */
export const isZeroId = (id: string) => /^0+$/.test(id)

/**
 * Reads `body` up to the flush after its command list. Throws (a message for git to print) when
 * it is not a command list agentd can read: malformed, longer than COMMANDS_MAX_BYTES, or signed
 * (a push certificate). A body that is only a flush (git's probe before a large push) has no command.
 */
export async function readPushRequest(body: ReadableStream<Uint8Array>): Promise<PushRequest> {
  const reader = body.getReader()
  let buffered = new Uint8Array(0)
  let at = 0
  let ended = false
  /** At least `n` bytes buffered from `at`, or false at the body's end. */
  const need = async (n: number): Promise<boolean> => {
    while (buffered.length - at < n) {
      if (ended) return false
      if (buffered.length >= COMMANDS_MAX_BYTES) throw new Error(`a push's command list is at most ${COMMANDS_MAX_BYTES} bytes`)
      const next = await reader.read()
      if (next.done) {
        ended = true
        continue
      }
      const joined = new Uint8Array(buffered.length + next.value.length)
      joined.set(buffered)
      joined.set(next.value, buffered.length)
      buffered = joined
    }
    return true
  }
  const decoder = new TextDecoder()
  const commands: RefCommand[] = []
  let capabilities: string[] = []
  for (;;) {
    if (!(await need(4))) {
      // An empty body: nothing to push.
      if (at === 0 && buffered.length === 0) break
      throw new Error('the push request ended before its command list did')
    }
    const size = Number.parseInt(decoder.decode(buffered.subarray(at, at + 4)), 16)
    if (!/^[0-9a-f]{4}$/.test(decoder.decode(buffered.subarray(at, at + 4))) || (size > 0 && size < 4))
      throw new Error('the push request is not in pkt-line form')
    if (size === 0) {
      at += 4 // the flush that ends the list
      break
    }
    if (!(await need(size))) throw new Error('the push request ended before its command list did')
    const line = decoder.decode(buffered.subarray(at + 4, at + size)).replace(/\n$/, '')
    at += size
    if (line.startsWith('shallow ')) continue
    const [command, caps] = line.split('\0') as [string, string | undefined]
    if (caps !== undefined) capabilities = caps.trim().split(' ').filter(Boolean)
    if (command === 'push-cert') throw new Error('agentd takes no signed pushes')
    const [old, next, ref, ...more] = command.split(' ')
    if (!old || !next || !ref || more.length > 0 || !ID.test(old) || !ID.test(next))
      throw new Error('the push request has a malformed command')
    commands.push({ old, new: next, ref })
  }
  const consumed = buffered
  const rest = new ReadableStream<Uint8Array>({
    start(controller) {
      if (consumed.length > 0) controller.enqueue(consumed)
      if (ended) controller.close()
    },
    async pull(controller) {
      if (ended) return
      const next = await reader.read()
      if (next.done) controller.close()
      else controller.enqueue(next.value)
    },
    cancel(reason) {
      return reader.cancel(reason)
    },
  })
  return { commands, capabilities, body: rest }
}

/** One pkt-line of `text`. */
export function pktLine(text: string | Uint8Array): Uint8Array {
  const bytes = typeof text === 'string' ? new TextEncoder().encode(text) : text
  const line = new Uint8Array(bytes.length + 4)
  line.set(new TextEncoder().encode((bytes.length + 4).toString(16).padStart(4, '0')))
  line.set(bytes, 4)
  return line
}

const FLUSH = new TextEncoder().encode('0000')

const concat = (parts: Uint8Array[]) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const part of parts) {
    out.set(part, at)
    at += part.length
  }
  return out
}

/**
 * receive-pack's answer refusing every command of a push, with `reasons` (by ref) for git to print
 * as `! [remote rejected] <ref> (<reason>)`, and `message` as a `remote:` line when the client
 * takes side-band. The report-status the client asked for; nothing was unpacked or updated.
 */
export function refusal(commands: RefCommand[], capabilities: string[], reasons: Map<string, string>, message: string): Uint8Array {
  const report = concat([
    pktLine('unpack ok\n'),
    ...commands.map((c) => pktLine(`ng ${c.ref} ${reasons.get(c.ref) ?? 'refused'}\n`)),
    FLUSH,
  ])
  if (!capabilities.includes('side-band-64k') && !capabilities.includes('side-band')) return report
  // Side-band: the report on band 1 (split to fit), a message on band 2.
  const max = capabilities.includes('side-band-64k') ? 65515 : 995
  const parts = [pktLine(concat([Uint8Array.of(2), new TextEncoder().encode(`${message}\n`)]))]
  for (let at = 0; at < report.length; at += max) parts.push(pktLine(concat([Uint8Array.of(1), report.subarray(at, at + max)])))
  return concat([...parts, FLUSH])
}
