/**
 * Runs a real harness CLI for one turn against a real gateway speaking for the scripted model, as
 * the session runtime would, minus the sandbox. A recording proxy in front of the gateway lets a
 * test see every model request a session's CLI sent.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { startGateway, type Gateway, type UsageRecord } from '../../src/gateway/gateway'
import type { HarnessAdapter, HarnessEvent, TurnOutcome, TurnSpec } from '../../src/harness/harness'

export interface LabSession {
  token: string
  workspace: string
  home: string
}

export interface TurnRun {
  events: HarnessEvent[]
  outcome: TurnOutcome
  exitCode: number
  /** Raw stdout lines, empty ones dropped (as the runtime stores them). */
  lines: string[]
  stderr: string
  spec: TurnSpec
}

export interface Lab {
  newSession(): LabSession
  runTurn(adapter: HarnessAdapter, session: LabSession, prompt: string, extra?: Partial<TurnSpec>): Promise<TurnRun>
  /** Parsed bodies of the model requests a session's CLI sent, oldest first. */
  requestsOf(session: LabSession): { path: string; body: any }[]
  usageOf(session: LabSession): UsageRecord[]
  close(): Promise<void>
}

export function startLab(name: string): Lab {
  const root = mkdtempSync(join(tmpdir(), `agentd-${name}-`))
  const sessions = new Map<string, { sessionId: string; workspace: string }>()
  const requests: { token: string | null; path: string; body: any }[] = []
  const usage: UsageRecord[] = []
  const gateway: Gateway = startGateway({ resolve: (token) => sessions.get(token) ?? null, onUsage: (u) => usage.push(u) })
  const proxy = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    idleTimeout: 0,
    async fetch(req) {
      const url = new URL(req.url)
      const body = req.method === 'POST' ? await req.text() : undefined
      const token =
        req.headers.get('x-api-key') ??
        req.headers.get('x-goog-api-key') ??
        req.headers.get('authorization')?.replace(/^Bearer /, '') ??
        null
      if (body) requests.push({ token, path: url.pathname, body: JSON.parse(body) })
      return fetch(gateway.url + url.pathname + url.search, { method: req.method, headers: req.headers, body })
    },
  })

  return {
    newSession() {
      const token = `tok-${crypto.randomUUID()}`
      const workspace = mkdtempSync(join(root, 'ws-'))
      sessions.set(token, { sessionId: token, workspace })
      return { token, workspace, home: mkdtempSync(join(root, 'home-')) }
    },
    async runTurn(adapter, session, prompt, extra = {}) {
      const spec: TurnSpec = {
        prompt,
        workspace: session.workspace,
        home: session.home,
        gatewayUrl: `http://127.0.0.1:${proxy.port}`,
        gatewayToken: session.token,
        model: 'scripted',
        ...extra,
      }
      const command = adapter.buildTurn(spec)
      for (const [path, content] of Object.entries(command.files ?? {})) {
        mkdirSync(dirname(join(session.home, path)), { recursive: true })
        await Bun.write(join(session.home, path), content)
      }
      const proc = Bun.spawn(command.argv, { cwd: session.workspace, env: command.env, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
      const [stdout, stderr, exitCode] = await Promise.all([
        new Response(proc.stdout).text(),
        new Response(proc.stderr).text(),
        proc.exited,
      ])
      const lines = stdout.split('\n').filter((line) => line.trim() !== '')
      const parser = adapter.createParser(spec)
      const events = lines.flatMap((line) => parser.push(line))
      return { events, outcome: parser.finish(exitCode), exitCode, lines, stderr, spec }
    },
    requestsOf: (session) => requests.filter((r) => r.token === session.token).map(({ path, body }) => ({ path, body })),
    usageOf: (session) => usage.filter((u) => u.sessionId === session.token),
    async close() {
      proxy.stop(true)
      await gateway.stop()
      rmSync(root, { recursive: true, force: true })
    },
  }
}

/** The acceptance script: think, say, a pipe, a failing command, a file write, an answer. */
export const ACCEPTANCE_STEPS = [
  { think: 'plan the listing' },
  { say: 'Looking around' },
  { bash: 'ls / | head -3' },
  { bash: 'false' },
  { write: { path: 'notes/out.txt', content: 'written by the agent' } },
  { answer: 'all done' },
]

export const scriptPrompt = (steps: unknown) => `Scripted task\n\`\`\`agentd-script\n${JSON.stringify(steps)}\n\`\`\``
