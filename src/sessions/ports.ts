import type { AgentConfig } from '../db/schema'

/** A saved agent's revision as a run takes it (shape B `agent_id`). */
export interface AgentProfile {
  id: string
  name: string
  revision: number
  digest: string
  catalogRevision: string
  config: AgentConfig
}

/**
 * Saved agents as a create reads them: the reviewed profile a run starts from, or the error that
 * refuses it (no such agent, a catalog changed since its review). Saved agents implement it; they
 * sit above sessions, checking a profile by the very rules a run is checked by (create-rules.ts).
 */
export interface SavedAgentProfiles {
  forRun(orgId: string, id: string): AgentProfile
}
