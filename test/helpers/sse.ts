export interface SseFrame {
  id?: number
  event: string
  data: any
}

export interface SseReader {
  /** Frames until `done` (or `error`), or until `stopAfter` frames when given. */
  frames(stopAfter?: number): Promise<SseFrame[]>
  /** Comment lines seen so far (e.g. `keepalive`). */
  comments: string[]
  close(): void
}

/** Opens a server-sent event stream with fetch and parses its frames. */
export async function openSse(url: string, token: string, headers: Record<string, string> = {}): Promise<SseReader & { status: number }> {
  const controller = new AbortController()
  const res = await fetch(url, { headers: { authorization: `Bearer ${token}`, ...headers }, signal: controller.signal })
  const comments: string[] = []
  const reader = res.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ''
  async function next(): Promise<SseFrame | null> {
    for (;;) {
      const end = buffer.indexOf('\n\n')
      if (end >= 0) {
        const block = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        const frame: SseFrame = { event: 'message', data: null }
        let isFrame = false
        for (const line of block.split('\n')) {
          if (line.startsWith(':')) comments.push(line.slice(1).trim())
          else if (line.startsWith('id: ')) frame.id = Number(line.slice(4))
          else if (line.startsWith('event: ')) frame.event = line.slice(7)
          else if (line.startsWith('data: ')) {
            frame.data = JSON.parse(line.slice(6))
            isFrame = true
          }
        }
        if (isFrame) return frame
        continue
      }
      const { value, done } = await reader.read()
      if (done) return null
      buffer += decoder.decode(value, { stream: true })
    }
  }
  return {
    status: res.status,
    comments,
    async frames(stopAfter) {
      const out: SseFrame[] = []
      for (;;) {
        const frame = await next()
        if (!frame) return out
        out.push(frame)
        if (frame.event === 'done' || frame.event === 'error' || out.length === stopAfter) return out
      }
    },
    close() {
      controller.abort()
    },
  }
}
