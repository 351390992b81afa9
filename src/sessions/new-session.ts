import type { SessionStatus } from '../domain/status'
import type { ProjectRow } from '../identity/projects'
import type { Principal } from '../identity/service'
import type { SessionPlan } from './create-rules'
import type { SessionInsert } from '../session-record/store'

export interface NewSession {
  id: string
  orgId: string
  project: ProjectRow | null
  principal: Principal
  accountId: string | null
  plan: SessionPlan
  /** The repository its `resources` name, when its Project has none. */
  repository: { owner: string; name: string } | null
  /** The GitHub installation (its link id) the run reaches its repository through; null: none. */
  installation: string | null
  status: SessionStatus
  now: number
}

/** A new session's row: what its create asked for, on the Project's repository. */
export function newSessionRow({
  id,
  orgId,
  project,
  principal,
  accountId,
  plan,
  repository,
  installation,
  status,
  now,
}: NewSession): SessionInsert {
  return {
    id,
    orgId,
    projectId: project?.id ?? null,
    startedByUserId: principal.userId,
    apiKeyId: principal.apiKey?.id ?? null,
    accountId,
    agent: plan.agent,
    harness: plan.harness,
    harnessVersionRequested: plan.versionRequested,
    harnessVersionResolved: plan.versionResolved,
    status,
    mode: plan.mode,
    persistenceMode: plan.persistence,
    prompt: plan.prompt,
    title: plan.title,
    repoOwner: project?.repoOwner ?? repository?.owner ?? null,
    repoName: project?.repoName ?? repository?.name ?? null,
    baseBranch: plan.baseBranch,
    branch: plan.baseBranch,
    onPr: plan.onPr,
    githubInstallation: installation,
    model: plan.model,
    requestedModel: plan.requestedModel,
    effort: plan.effort,
    speed: plan.speed,
    outputSchema: plan.outputSchema,
    effectiveConfig: { harness_version: plan.versionResolved },
    createdAt: now,
    updatedAt: now,
  }
}
