import { badRequest } from '../domain/errors'
import type { AgentProfile } from './ports'
import type { RunSpec } from './create-rules'
import type { CreateSessionBody } from './model'
import type { SessionInsert } from '../session-record/store'

/** The create fields a run of a saved agent may set over the agent's own (spec 2.2 `requested_overrides`). */
const OVERRIDES = ['model', 'effort', 'speed'] as const

/**
 * A create naming a saved agent: its harness, model, effort and speed, with the caller's
 * overrides of model, effort and speed on top. The harness is the agent's: naming another is 400.
 */
export function withProfile(body: CreateSessionBody, profile: AgentProfile): CreateSessionBody {
  const { config } = profile
  if (body.agent !== undefined && body.agent.split('@')[0] !== config.harness) {
    throw badRequest(`saved agent "${profile.name}" runs ${config.harness}; harness cannot be changed for a run (send no harness)`)
  }
  const merged: CreateSessionBody = { ...body, agent: body.agent ?? config.harness }
  if (body.model === undefined && config.model) merged.model = config.model
  if (body.effort === undefined && config.effort) merged.effort = config.effort
  if (body.speed === undefined && config.speed) merged.speed = config.speed
  // The run's own skills replace the agent's; without any, it runs the agent's.
  if (body.skills === undefined && config.skills.length > 0) merged.skills = config.skills
  if (body.connections === undefined && config.connections.length > 0) merged.connections = config.connections
  return merged
}

/** The session's saved-agent fields (spec 2.2): what it was pinned to, what was asked over it, what it ran with. */
export function profileFields(body: CreateSessionBody, profile: AgentProfile, runSpec: RunSpec): Partial<SessionInsert> {
  const requested = Object.fromEntries(OVERRIDES.flatMap((field) => (body[field] !== undefined ? [[field, body[field]]] : [])))
  return {
    profileId: profile.id,
    profileRevision: profile.revision,
    profileDigest: profile.digest,
    agentProfile: { id: profile.id, name: profile.name },
    snapshot: { ...profile.config },
    requestedOverrides: Object.keys(requested).length > 0 ? requested : null,
    effective: {
      model: runSpec.model,
      effort: runSpec.effort,
      speed: runSpec.speed,
      harness_version: runSpec.versionResolved,
      catalog_revision: profile.catalogRevision,
      // Sandboxes run the host's own root file system, not an image: there is no digest to report.
      image_digest: null,
    },
  }
}
