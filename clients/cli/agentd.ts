#!/usr/bin/env bun
/**
 * `agentd`: agentd's command-line client, on the typed client of clients/typescript. Settings come
 * from the environment: AGENTD_URL (default http://127.0.0.1:8787), AGENTD_TOKEN (a signed-in
 * token or an API key), AGENTD_ORG (default: the org of --org).
 */
import { parseArgs } from 'node:util'
import { agentdClient } from '../typescript/index'
import { ENV_HELP, envCommand, secretsCommand, UsageError } from './environments'

const HELP = `agentd: start, follow and steer agentd sessions

usage: agentd <command> [options]

commands:
  run <prompt>            start a session (--agent harness_1|harness_2|harness_3, --model, --effort,
                          --project <handle or _>); with --follow, follow it to the end
  follow <session>        follow a session live: status, the current tool call, tokens and cost;
                          exits 0 when the turn completed, 1 when it failed or was cancelled
  send <session> <text>   send a follow-up message (delivered or queued)
  pause <session>         pause a session (its sandbox is parked)
  resume <session>        resume a paused session
  cancel <session>        cancel a session
  search [query]          search the org's sessions (--status, --limit)
  keys                    list the org's API keys (admins)
${ENV_HELP}

options:
  --org <slug>            the org (or AGENTD_ORG)
  --project <handle>      the Project (default _: no Project)
  --value <value>         secrets set: the value (else read from stdin, which keeps it out of ps)
  --json                  print the API's JSON answers instead of text
  --help                  this text

environment: AGENTD_URL (default http://127.0.0.1:8787), AGENTD_TOKEN, AGENTD_ORG`

interface Options {
  org: string
  project: string
  json: boolean
  agent?: string
  model?: string
  effort?: string
  status?: string
  limit?: string
  follow: boolean
}

/** Exit codes: 0 done, 1 the run failed or was cancelled, 2 bad usage, 3 the API refused. */
async function main(argv: string[], out: (line: string) => void): Promise<number> {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    strict: true,
    options: {
      org: { type: 'string' },
      project: { type: 'string' },
      agent: { type: 'string' },
      model: { type: 'string' },
      effort: { type: 'string' },
      status: { type: 'string' },
      limit: { type: 'string' },
      value: { type: 'string' },
      'setup-file': { type: 'string' },
      'setup-timeout': { type: 'string' },
      allow: { type: 'string' },
      follow: { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
  })
  const [command, ...args] = positionals
  if (values.help || !command) {
    out(HELP)
    return command || values.help ? 0 : 2
  }
  const token = process.env.AGENTD_TOKEN
  if (!token) throw new UsageError('AGENTD_TOKEN is not set')
  const org = values.org ?? process.env.AGENTD_ORG
  if (!org) throw new UsageError('--org (or AGENTD_ORG) is required')
  const base = process.env.AGENTD_URL ?? 'http://127.0.0.1:8787'
  const api = agentdClient(base, token)
  const opts: Options = { ...values, org, project: values.project ?? '_', json: values.json, follow: values.follow }
  const envOptions = {
    value: values.value,
    setupFile: values['setup-file'],
    setupTimeout: values['setup-timeout'],
    allow: values.allow,
    json: values.json,
  }
  const show = (data: unknown, text: string) => out(opts.json ? JSON.stringify(data) : text)
  const session = (id: string | undefined) => {
    if (!id) throw new UsageError(`${command} needs a session id`)
    return { path: { org, project: opts.project, session: id } }
  }

  switch (command) {
    case 'run': {
      const prompt = args.join(' ')
      if (!prompt) throw new UsageError('run needs a prompt')
      const body = {
        prompt,
        agent: opts.agent ?? 'harness_1',
        ...(opts.model ? { model: opts.model } : {}),
        ...(opts.effort ? { effort: opts.effort as never } : {}),
      }
      const { data, error } = await api.POST('/o/{org}/p/{project}/sessions', { params: { path: { org, project: opts.project } }, body })
      if (!data) return refused(error, out)
      show(data, `${data.execution_id} ${data.status}`)
      return opts.follow ? follow(base, token, org, opts.project, data.execution_id, out) : 0
    }
    case 'follow':
      if (!args[0]) throw new UsageError('follow needs a session id')
      return follow(base, token, org, opts.project, args[0], out)
    case 'send': {
      const content = args.slice(1).join(' ')
      if (!content) throw new UsageError('send needs a session id and a message')
      const { data, error } = await api.POST('/o/{org}/p/{project}/sessions/{session}/messages', {
        params: session(args[0]),
        body: { content },
      })
      if (!data) return refused(error, out)
      show(data, data.status === 'queued' ? `queued at ${data.position}` : 'sent')
      return 0
    }
    case 'pause':
    case 'resume':
    case 'cancel': {
      const status = command === 'pause' ? 'paused' : command === 'resume' ? 'running' : 'cancelled'
      const { data, error } = await api.PATCH('/o/{org}/p/{project}/sessions/{session}', { params: session(args[0]), body: { status } })
      if (!data) return refused(error, out)
      show(data, 'operation_id' in data ? `${command}: accepted (${data.operation_id})` : `${command}: ${data.status}`)
      return 0
    }
    case 'search': {
      const query = {
        ...(args.length > 0 ? { q: args } : {}),
        ...(opts.status ? { status: opts.status as never } : {}),
        ...(opts.limit ? { limit: Number(opts.limit) } : {}),
      }
      const { data, error } = await api.GET('/o/{org}/sessions', { params: { path: { org }, query } })
      if (!data) return refused(error, out)
      if (opts.json) out(JSON.stringify(data))
      else for (const s of 'sessions' in data ? data.sessions : []) out(`${s.id} ${s.status} ${s.title ?? ''}`)
      return 0
    }
    case 'keys': {
      const { data, error } = await api.GET('/o/{org}/api-keys', { params: { path: { org } } })
      if (!data) return refused(error, out)
      if (opts.json) out(JSON.stringify(data))
      else for (const key of data.data) out(`${key.id} ${key.name} ${key.prefix}… max_concurrent=${key.max_concurrent}`)
      return 0
    }
    case 'secrets':
      return secretsCommand(api, org, args, envOptions, out, (error) => refused(error, out))
    case 'env':
      return envCommand(api, org, args, envOptions, out, (error) => refused(error, out))
    default:
      throw new UsageError(`unknown command "${command}"`)
  }
}

function refused(error: unknown, out: (line: string) => void): number {
  const body = (error ?? {}) as { error?: string; message?: string; code?: string }
  out(`agentd: ${body.error ?? body.message ?? 'the request failed'}${body.code ? ` (${body.code})` : ''}`)
  return 3
}

/**
 * Follows a session's event stream (spec 6.1) and prints one line per change: status, the tool the
 * agent calls, its tokens and cost when the turn ends. Returns the exit code of its outcome.
 */
async function follow(base: string, token: string, org: string, project: string, id: string, out: (line: string) => void): Promise<number> {
  const res = await fetch(`${base}/o/${org}/p/${project}/sessions/${id}/events`, {
    headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' },
  })
  if (!res.ok || !res.body) return refused(await res.json().catch(() => null), out)
  let tokens = 0
  const decoder = new TextDecoder()
  let buffer = ''
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true })
    let end: number
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, end)
      buffer = buffer.slice(end + 2)
      const event = /^event: (.*)$/m.exec(frame)?.[1] ?? 'message'
      const data = /^data: (.*)$/m.exec(frame)?.[1]
      if (!data) continue
      const body = JSON.parse(data) as Record<string, any>
      if (event === 'status') out(`status: ${body.status}`)
      else if (event === 'done') {
        const view = (await (
          await fetch(`${base}/o/${org}/p/${project}/sessions/${id}`, { headers: { authorization: `Bearer ${token}` } })
        ).json()) as { total_tokens?: number; total_cost_usd?: number }
        out(`done: ${body.status} · ${view.total_tokens ?? tokens} tokens · $${(view.total_cost_usd ?? 0).toFixed(4)}`)
        if (body.result?.text) out(body.result.text)
        return ['completed', 'needs_review', 'input_required'].includes(body.status) ? 0 : 1
      } else if (event === 'error') {
        out(`error: ${body.message}`)
        return 1
      } else if (body.type === 'tool_use')
        out(`tool: ${body.tool ?? '?'} ${body.command ?? (body.args ? JSON.stringify(body.args).slice(0, 80) : '')}`.trimEnd())
      else if (body.type === 'usage') {
        tokens += (body.inputTokens ?? 0) + (body.outputTokens ?? 0)
        out(`tokens: ${tokens}`)
      }
    }
  }
  out('the stream ended before the run did')
  return 1
}

if (import.meta.main) {
  try {
    process.exit(await main(process.argv.slice(2), (line) => console.log(line)))
  } catch (err) {
    const usage = err instanceof UsageError || (err as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
    console.error(`agentd: ${(err as Error).message}`)
    if (usage) console.error('run agentd --help for the commands')
    process.exit(usage ? 2 : 1)
  }
}
