import { sessionMachine } from '../../machines/session.machine'
import type { Principal } from '../identity/service'
import type { SessionInsert, SessionRow } from '../session-record/store'

/**
 * A fork's row (contract section 13): its source's run (harness, model, repository, Project,
 * account, saved agent, the CLI's own conversation id) as a new session that has run no turn of
 * its own, resting `completed` with a parked sandbox, started by whoever forked it. Its turns
 * publish to a branch of its own (`agentd/<its id>`, a pull request of its own), even when its
 * source continues a pull request (`on_pr`): the two never push over each other.
 */
export function forkRow(source: SessionRow, id: string, principal: Principal, now: number): SessionInsert {
  return {
    id,
    orgId: source.orgId,
    projectId: source.projectId,
    startedByUserId: principal.userId,
    apiKeyId: principal.apiKey?.id ?? null,
    accountId: source.accountId,
    agent: source.agent,
    harness: source.harness,
    harnessVersionRequested: source.harnessVersionRequested,
    harnessVersionResolved: source.harnessVersionResolved,
    status: 'completed',
    mode: source.mode,
    persistenceMode: 'resumable',
    machineState: 'paused',
    prompt: source.prompt,
    title: source.title,
    repoOwner: source.repoOwner,
    repoName: source.repoName,
    baseBranch: source.baseBranch,
    branch: source.baseBranch,
    onPr: null,
    githubInstallation: source.githubInstallation,
    model: source.model,
    requestedModel: source.requestedModel,
    effort: source.effort,
    speed: source.speed,
    outputSchema: source.outputSchema,
    effectiveConfig: source.effectiveConfig,
    harnessSessionId: source.harnessSessionId,
    sandboxNode: source.sandboxNode,
    profileId: source.profileId,
    profileRevision: source.profileRevision,
    profileDigest: source.profileDigest,
    agentProfile: source.agentProfile,
    snapshot: source.snapshot,
    requestedOverrides: source.requestedOverrides,
    effective: source.effective,
    forkedFromSession: source.id,
    forkedFromTurn: source.turnsCount,
    createdAt: now,
    updatedAt: now,
  }
}

/** A fork's machine snapshot: between turns, `completed`, its sandbox parked. */
export function forkSnapshot(source: Pick<SessionRow, 'mode' | 'outputSchema'>) {
  return sessionMachine.getPersistedSnapshot(
    sessionMachine.resolveState({
      value: 'completed',
      context: {
        persistence: 'resumable',
        mode: source.mode,
        hasSchema: source.outputSchema !== null,
        machineState: 'paused',
        error: null,
        hasSandbox: true,
        turnActive: false,
        queued: 0,
        restStatus: 'completed',
      },
    }),
  )
}
