export const HARNESSES = ['harness_1', 'harness_2', 'harness_3'] as const
export type Harness = (typeof HARNESSES)[number]

export const EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max', 'auto'] as const
export type Effort = (typeof EFFORTS)[number]

export const SPEEDS = ['standard', 'fast'] as const
export type Speed = (typeof SPEEDS)[number]

export function isHarness(value: string): value is Harness {
  return (HARNESSES as readonly string[]).includes(value)
}

/** Splits `harness_1@2.1.197` into the harness and the pinned CLI version. */
export function parseAgent(agent: string): { harness: string; version: string | null } {
  const at = agent.indexOf('@')
  if (at < 0) return { harness: agent, version: null }
  return { harness: agent.slice(0, at), version: agent.slice(at + 1) || null }
}
