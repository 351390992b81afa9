export interface RequestOptions {
  token?: string
  body?: unknown
  headers?: Record<string, string>
}

/** A Request for `app.handle`; Elysia needs an absolute URL with a real-looking host. */
export function req(method: string, path: string, options: RequestOptions = {}): Request {
  const headers: Record<string, string> = { ...options.headers }
  if (options.token) headers.authorization = `Bearer ${options.token}`
  let body: string | undefined
  if (options.body !== undefined) {
    headers['content-type'] ??= 'application/json'
    body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body)
  }
  return new Request(`http://localhost${path}`, { method, headers, body })
}

export async function json<T = any>(res: Response): Promise<T> {
  const text = await res.text()
  try {
    return JSON.parse(text) as T
  } catch {
    throw new Error(`expected JSON, got ${res.status}: ${text.slice(0, 200)}`)
  }
}

export { waitFor } from './poll'

export const script = (steps: unknown[]): string => `Do the task.\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\``
