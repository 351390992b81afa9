import type { AgentdClient } from '../typescript'

export interface StartAgentdOptions {
  /** The sandbox driver: `process` (default), `bwrap` or `gvisor` (both need root). */
  sandbox?: 'process' | 'bwrap' | 'gvisor'
  /** The org made for the test (default `test`). */
  org?: string
  /** More of agentd's environment (contract section 1), e.g. `{ AGENTD_TIME_SCALE: '0.01' }`. */
  env?: Record<string, string>
  /** agentd's own log lines (default: none). */
  log?: (line: string) => void
}

/** A real agentd for a test suite; `stop()` (or `await using`) leaves no process, sandbox or file behind. */
export interface TestAgentd {
  /** Where it listens (127.0.0.1, a free port). */
  url: string
  /** The bearer token of the org's admin. */
  token: string
  org: string
  /** An API key of the org (runs:read, runs:write): runs made with it post its webhook. */
  apiKey: string
  /** The key's id: `PATCH /o/{org}/api-keys/{id}` sets its webhook_url. */
  apiKeyId: string
  /** The typed client (clients/typescript), as the admin. */
  client: AgentdClient
  stop(): Promise<void>
  [Symbol.asyncDispose](): Promise<void>
}

export function startAgentd(options?: StartAgentdOptions): Promise<TestAgentd>
